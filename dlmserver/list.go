package dlmserver

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

var _ driver.Lister = (*Store)(nil)

// maxListPage is the most resources of a page of the server
// (server.MaxListLimit).
const maxListPage = 1000

// List returns the resources whose name starts with prefix that have a
// holder or a waiter, sorted by name, at most limit of them, from the
// server the store is connected to, in pages of at most 1000 resources and
// 500 locks. A resource with more locks than a page holds comes in pieces
// over several pages, which List joins into one ResourceInfo. Each page is
// read at one moment; a listing of several pages is not one snapshot (a
// resource cut across pages that changes meanwhile can show a holder or
// waiter twice, or miss one). A
// server that is not the Raft leader answers from its own state, which may
// lag the leader's. List is a plain call on the store's connection: it
// works without a live session, and fails with driver.ErrUnavailable when
// the server cannot be reached.
//
// Holders are in grant order, with their mode (zero for a semaphore),
// permits (semaphores), token, metadata and when they were granted. Owners
// are the server's: Session is the holder's session id and Owner its owner
// number within that session, both in decimal, and SessionLabel the label
// the session was opened with (see WithLabel); the request's own owner id
// does not reach the server. The server keeps a lock while its session
// lives, so TTL is the time left before the holder's session expires
// without a keepalive, as the leader sees it (zero from another node); the
// lease TTL itself is enforced by the client that holds it. Waiters are in the order they will be served: conversions first
// (with Conversion set and the mode they asked for), then new requests,
// each with when it was queued and its metadata. Capacity is the number of
// permits of a semaphore.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]driver.ResourceInfo, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: list limit %d is not positive", driver.ErrInvalid, limit)
	}
	return s.list(ctx, prefix, limit, false)
}

// list is List; with exact, of the resource named prefix only.
func (s *Store) list(ctx context.Context, prefix string, limit int, exact bool) ([]driver.ResourceInfo, error) {
	if err := s.open(); err != nil {
		return nil, err
	}
	var out []driver.ResourceInfo
	after := ""
	cut := false // the last resource of out goes on in the next page
	for len(out) < limit || cut {
		page := max(1, min(limit-len(out), maxListPage))
		resp, err := s.rpc().List(ctx, &dlmpb.ListRequest{Prefix: prefix, After: after, Limit: int32(page), Exact: exact})
		if err != nil {
			return nil, s.rpcError(ctx, "list", err)
		}
		for _, r := range resp.GetResources() {
			info := resourceInfo(r)
			if n := len(out); cut && r.GetFirst() > 0 && out[n-1].Resource == info.Resource {
				out[n-1].Holders = append(out[n-1].Holders, info.Holders...)
				out[n-1].Waiters = append(out[n-1].Waiters, info.Waiters...)
			} else {
				out = append(out, info)
			}
			cut = r.GetContinues()
		}
		if resp.GetNext() == "" || len(resp.GetResources()) == 0 {
			break
		}
		after = resp.GetNext()
	}
	return out[:min(len(out), limit)], nil
}

// resourceInfo converts the server's description of a resource.
func resourceInfo(r *dlmpb.ResourceInfo) driver.ResourceInfo {
	info := driver.ResourceInfo{Resource: r.GetName()}
	sem := r.GetSemaphore()
	if sem {
		info.Capacity = int(r.GetCapacity())
	}
	for _, l := range r.GetHolders() {
		h := driver.HolderInfo{
			Owner:        strconv.FormatUint(l.GetOwner(), 10),
			Session:      strconv.FormatUint(l.GetSession(), 10),
			SessionLabel: l.GetSessionLabel(),
			Mode:         driver.Mode(l.GetMode()),
			Token:        l.GetToken(),
			TTL:          l.GetSessionExpiresIn().AsDuration(),
			Since:        timeOf(l.GetGrantedAt()),
			Metadata:     l.GetMetadata(),
		}
		if sem {
			h.Permits = int(l.GetPermits())
		}
		info.Holders = append(info.Holders, h)
	}
	for _, q := range [][]*dlmpb.LockInfo{r.GetConverting(), r.GetWaiting()} {
		for _, l := range q {
			w := driver.WaiterInfo{
				Owner:        strconv.FormatUint(l.GetOwner(), 10),
				Session:      strconv.FormatUint(l.GetSession(), 10),
				SessionLabel: l.GetSessionLabel(),
				Mode:         driver.Mode(l.GetRequested()),
				Conversion:   l.GetState() == dlmpb.LockInfo_STATE_CONVERTING,
				Since:        timeOf(l.GetQueuedAt()),
				Metadata:     l.GetMetadata(),
			}
			if sem {
				w.Permits = int(l.GetPermits())
			}
			info.Waiters = append(info.Waiters, w)
		}
	}
	return info
}

// timeOf returns the time of a Timestamp, or the zero time if it is unset
// (an older server, or a time that does not apply).
func timeOf(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

// open returns an error once the store is closed.
func (s *Store) open() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.st.closing {
		return fmt.Errorf("%w: the store is closed", driver.ErrUnavailable)
	}
	return nil
}

// rpcError classifies the error of a unary call to the server: the end of
// ctx as such, an argument the server rejected as driver.ErrInvalid,
// refused credentials or rights as ErrUnauthenticated or
// ErrPermissionDenied, a bound of the server as ErrLimit, and anything
// else as the server being unavailable.
func (s *Store) rpcError(ctx context.Context, op string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("dlm %s: %w", op, cerr)
	}
	if status.Code(err) == codes.InvalidArgument {
		return fmt.Errorf("%w: dlm %s: %s", driver.ErrInvalid, op, status.Convert(err).Message())
	}
	if aerr := authError(err); aerr != nil {
		return fmt.Errorf("dlm %s: %w", op, aerr)
	}
	if status.Code(err) == codes.ResourceExhausted {
		return fmt.Errorf("%w: dlm %s: %s", ErrLimit, op, status.Convert(err).Message())
	}
	return fmt.Errorf("%w: dlm %s: %w", driver.ErrUnavailable, op, err)
}
