package driver

import (
	"context"
	"time"
)

// Lister is implemented by stores that can show their locks, for listing
// tools such as `dlm ls`. Listing is a diagnostic view: it is read at one
// moment and may be stale by the time it is shown.
type Lister interface {
	// List returns the resources whose name starts with prefix ("" for
	// all) that have a holder or a waiter, sorted by name, at most limit
	// of them (limit > 0). A store that cannot filter by prefix says so in
	// its documentation and returns ErrUnsupported for a non-empty prefix.
	List(ctx context.Context, prefix string, limit int) ([]ResourceInfo, error)
}

// ResourceInfo is one resource as a Lister sees it.
type ResourceInfo struct {
	// Resource is the lock's name as the application gave it, or the
	// store's own key where the name cannot be recovered (such as a
	// PostgreSQL advisory key), as the store documents.
	Resource string
	// Capacity is the number of permits when the resource is a
	// semaphore, or 0.
	Capacity int
	// Holders are the granted locks.
	Holders []HolderInfo
	// Waiters are the queued requests, first in line first.
	Waiters []WaiterInfo
}

// HolderInfo describes one granted lock. Fields a store cannot know are
// left zero.
type HolderInfo struct {
	// Owner identifies the holder: the owner id of the request, or the
	// store's own id for it (a session, a database backend's pid).
	Owner string
	// Session is the holder's session, where the store has sessions.
	Session string
	// SessionLabel is the label the holder's session was opened with
	// (such as "dlm run backup.sh (host pid 4242)"), where the store
	// keeps one.
	SessionLabel string
	// Mode is the granted mode.
	Mode Mode
	// Permits is the number of semaphore permits held.
	Permits int
	// Token is the grant's fencing token.
	Token uint64
	// TTL is the time left before the lock expires unrenewed, as the store
	// saw it when listing.
	TTL time.Duration
	// Since is when the lock was granted.
	Since time.Time
	// Metadata is the free-form description given at acquisition.
	Metadata string
}

// WaiterInfo describes one queued request. Fields a store cannot know are
// left zero.
type WaiterInfo struct {
	// Owner identifies the waiter, as in HolderInfo.
	Owner string
	// Session is the waiter's session, where the store has sessions.
	Session string
	// SessionLabel is the label of the waiter's session, as in
	// HolderInfo.
	SessionLabel string
	// Mode is the requested mode.
	Mode Mode
	// Permits is the number of semaphore permits requested.
	Permits int
	// Conversion is true for a holder waiting to convert its lock.
	Conversion bool
	// Since is when the request was queued.
	Since time.Time
	// Metadata is the free-form description given with the request.
	Metadata string
}
