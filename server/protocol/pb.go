package protocol

import (
	"strings"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/buildinfo"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/raftnode"
)

// This file is the one place where the lock table's descriptions (locks,
// resources, sessions, counts) and the Raft configuration become the
// protocol's messages, for gRPC and for the JSON of the HTTP API alike.

// Source is what a listing shows beside the lock table, read as of the
// same FSM state as the table. A nil func leaves its part out: the zero
// Source shows the table alone, as SessionSync does (the client sent its
// locks' metadata itself, and leaving it out keeps the sync of a full
// session, MaxLocksPerSession locks with 1 KiB each, within gRPC's default
// 4 MiB message size).
type Source struct {
	// Metadata returns the holder description of a lock (fsm.View.Metadata).
	Metadata func(locktable.LockID) []byte
	// Label returns the label of a session (locktable.Table.SessionLabel).
	Label func(locktable.SessionID) (string, bool)
	// Session returns the state machine's record of a session: its TTL and
	// owner (fsm.View.Session).
	Session func(locktable.SessionID) (fsm.SessionMeta, bool)
	// ExpiresIn returns the time left until a session expires without a
	// keepalive, if this node knows it (it is the serving leader).
	ExpiresIn func(locktable.SessionID) (time.Duration, bool)
	// Owners shows each session's owner: for administrators only.
	Owners bool
}

// LockInfo converts a lock description to its protocol form: the modes,
// token, permits and times that do not apply to l are left unset.
func LockInfo(l locktable.LockInfo, src Source) *dlmpb.LockInfo {
	semaphore := l.Kind == locktable.KindSemaphore
	pb := &dlmpb.LockInfo{
		LockId:    uint64(l.ID),
		Session:   uint64(l.Session),
		Owner:     uint64(l.Owner),
		Resource:  l.Resource,
		Semaphore: semaphore,
		State:     dlmpb.LockInfo_State(l.State),
	}
	if l.Mode.Valid() {
		pb.Mode = dlmpb.Mode(l.Mode).Enum()
	}
	if l.Requested.Valid() {
		pb.Requested = dlmpb.Mode(l.Requested).Enum()
	}
	if semaphore {
		pb.Permits = proto.Uint32(l.Permits)
	}
	if l.State != locktable.LockWaiting {
		pb.Token = proto.Uint64(l.Token)
		pb.GrantedAt = tableTime(l.GrantedAt)
	}
	if l.State != locktable.LockGranted {
		pb.QueuedAt = tableTime(l.QueuedAt)
		if l.Deadline != 0 {
			pb.Deadline = tableTime(l.Deadline)
		}
	}
	if src.Metadata != nil {
		pb.Metadata = Text(src.Metadata(l.ID))
	}
	if src.Label != nil {
		pb.SessionLabel, _ = src.Label(l.Session)
	}
	if src.ExpiresIn != nil {
		if d, ok := src.ExpiresIn(l.Session); ok {
			pb.SessionExpiresIn = durationpb.New(d)
		}
	}
	return pb
}

// LockInfos converts lock descriptions to their protocol form.
func LockInfos(ls []locktable.LockInfo, src Source) []*dlmpb.LockInfo {
	out := make([]*dlmpb.LockInfo, len(ls))
	for i, l := range ls {
		out[i] = LockInfo(l, src)
	}
	return out
}

// ResourceInfo converts a resource description to its protocol form,
// with the full lengths of its lists and, for a piece of a page, where it
// starts and whether it continues.
func ResourceInfo(r locktable.ResourceInfo, src Source) *dlmpb.ResourceInfo {
	pb := &dlmpb.ResourceInfo{
		Name:            r.Name,
		Semaphore:       r.Kind == locktable.KindSemaphore,
		Holders:         LockInfos(r.Holders, src),
		Converting:      LockInfos(r.Converting, src),
		Waiting:         LockInfos(r.Waiting, src),
		HoldersTotal:    uint32(r.HoldersTotal),
		ConvertingTotal: uint32(r.ConvertingTotal),
		WaitingTotal:    uint32(r.WaitingTotal),
		First:           uint32(r.First),
		Continues:       r.Continues,
	}
	if pb.Semaphore {
		pb.Capacity, pb.Used = proto.Uint32(r.Capacity), proto.Uint32(r.Used)
	}
	return pb
}

// SessionInfo converts a session of a page to its protocol form, with its
// locks of the page (GET /v1/sessions): lock_count is si.LocksTotal.
func SessionInfo(si locktable.SessionInfo, src Source) *dlmpb.SessionInfo {
	pb := session(si, src)
	pb.LockCount = int64(si.LocksTotal)
	pb.Locks = LockInfos(si.Locks, src)
	pb.First, pb.Continues = uint32(si.First), si.Continues
	return pb
}

// SessionSummary converts a session to its protocol form with its locks,
// si.Locks (all of them, or those the caller may see), counted instead of
// listed (ListSessions, the live feed).
func SessionSummary(si locktable.SessionInfo, src Source) *dlmpb.SessionInfo {
	pb := session(si, src)
	var held, waiting int64
	for _, l := range si.Locks {
		if l.State != locktable.LockWaiting {
			held++
		}
		if l.State != locktable.LockGranted {
			waiting++
		}
	}
	pb.LockCount, pb.Held, pb.Waiting = int64(len(si.Locks)), &held, &waiting
	return pb
}

// session converts what SessionInfo and SessionSummary share.
func session(si locktable.SessionInfo, src Source) *dlmpb.SessionInfo {
	pb := &dlmpb.SessionInfo{Id: uint64(si.ID), Label: si.Label, OpenedAt: tableTime(si.OpenedAt)}
	if src.Session != nil {
		if rec, ok := src.Session(si.ID); ok {
			pb.Ttl = durationpb.New(rec.TTL)
			if src.Owners {
				pb.Owner = proto.String(rec.Owner)
			}
		}
	}
	if src.ExpiresIn != nil {
		if d, ok := src.ExpiresIn(si.ID); ok {
			pb.ExpiresIn = durationpb.New(d)
		}
	}
	return pb
}

// Status returns a status with the table's counts; the caller adds what
// it knows of the node.
func Status(st locktable.Stats) *dlmpb.StatusResponse {
	return &dlmpb.StatusResponse{
		LastToken: st.LastToken,
		Sessions:  int64(st.Sessions),
		Resources: int64(st.Resources),
		Locks:     int64(st.Locks),
		Pending:   int64(st.Pending),
	}
}

// Build converts the description of a build; an unknown time is left out.
func Build(info buildinfo.Info) *dlmpb.BuildInfo {
	pb := &dlmpb.BuildInfo{
		Version:   info.Version,
		Revision:  info.Revision,
		Modified:  info.Modified,
		GoVersion: info.GoVersion,
	}
	if !info.Time.IsZero() {
		pb.Time = timestamppb.New(info.Time)
	}
	return pb
}

// Members converts the Raft configuration as a node knows it.
func Members(ms []raftnode.Member) []*dlmpb.Member {
	out := make([]*dlmpb.Member, len(ms))
	for i, m := range ms {
		out[i] = &dlmpb.Member{
			Id: m.ID, Address: m.Address, ClientAddress: m.Client, HttpAddress: m.HTTP,
			Suffrage: m.Suffrage, Leader: m.Leader, Self: m.Self,
		}
	}
	return out
}

// Text returns metadata as the protocol shows it: the bytes as given when
// they are UTF-8 (the server accepts any bytes), with U+FFFD for each
// sequence that is not.
func Text(b []byte) string { return strings.ToValidUTF8(string(b), "\uFFFD") }

// tableTime converts a time of the table's replicated clock (Unix
// nanoseconds).
func tableTime(nanos int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(0, nanos)) }
