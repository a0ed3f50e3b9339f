package server

import (
	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// metaFunc returns the holder description of a lock (FSM.metadataOf).
type metaFunc func(locktable.LockID) []byte

// noMetadata is the metaFunc of a session's sync message: the client sent
// its locks' metadata itself, and leaving it out keeps the sync of a full
// session (MaxLocksPerSession locks with 1 KiB each) within gRPC's default
// 4 MiB message size.
func noMetadata(locktable.LockID) []byte { return nil }

// lockInfoPB converts a lock description to its protocol form.
func lockInfoPB(l locktable.LockInfo, meta metaFunc) *dlmpb.LockInfo {
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

func lockInfosPB(ls []locktable.LockInfo, meta metaFunc) []*dlmpb.LockInfo {
	out := make([]*dlmpb.LockInfo, len(ls))
	for i, l := range ls {
		out[i] = lockInfoPB(l, meta)
	}
	return out
}

// resourceInfoPB converts a resource description to its protocol form.
func resourceInfoPB(r locktable.ResourceInfo, meta metaFunc) *dlmpb.ResourceInfo {
	return &dlmpb.ResourceInfo{
		Name:       r.Name,
		Semaphore:  r.Kind == locktable.KindSemaphore,
		Capacity:   r.Capacity,
		Used:       r.Used,
		Holders:    lockInfosPB(r.Holders, meta),
		Converting: lockInfosPB(r.Converting, meta),
		Waiting:    lockInfosPB(r.Waiting, meta),
	}
}
