package protocol

import (
	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// MetaFunc returns the holder description of a lock (FSM.metadataOf).
type MetaFunc func(locktable.LockID) []byte

// NoMetadata is the MetaFunc of a session's sync message: the client sent
// its locks' metadata itself, and leaving it out keeps the sync of a full
// session (MaxLocksPerSession locks with 1 KiB each) within gRPC's default
// 4 MiB message size.
func NoMetadata(locktable.LockID) []byte { return nil }

// LockInfo converts a lock description to its protocol form.
func LockInfo(l locktable.LockInfo, meta MetaFunc) *dlmpb.LockInfo {
	return &dlmpb.LockInfo{
		Metadata:          meta(l.ID),
		LockId:            uint64(l.ID),
		Session:           uint64(l.Session),
		Owner:             uint64(l.Owner),
		Resource:          l.Resource,
		Semaphore:         l.Kind == locktable.KindSemaphore,
		State:             dlmpb.LockInfo_State(l.State),
		Mode:              dlmpb.Mode(l.Mode),
		Requested:         dlmpb.Mode(l.Requested),
		Permits:           l.Permits,
		Token:             l.Token,
		GrantedAtUnixNano: l.GrantedAt,
		QueuedAtUnixNano:  l.QueuedAt,
		DeadlineUnixNano:  l.Deadline,
	}
}

func LockInfos(ls []locktable.LockInfo, meta MetaFunc) []*dlmpb.LockInfo {
	out := make([]*dlmpb.LockInfo, len(ls))
	for i, l := range ls {
		out[i] = LockInfo(l, meta)
	}
	return out
}

// ResourceInfo converts a resource description to its protocol form.
func ResourceInfo(r locktable.ResourceInfo, meta MetaFunc) *dlmpb.ResourceInfo {
	return &dlmpb.ResourceInfo{
		Name:       r.Name,
		Semaphore:  r.Kind == locktable.KindSemaphore,
		Capacity:   r.Capacity,
		Used:       r.Used,
		Holders:    LockInfos(r.Holders, meta),
		Converting: LockInfos(r.Converting, meta),
		Waiting:    LockInfos(r.Waiting, meta),
	}
}
