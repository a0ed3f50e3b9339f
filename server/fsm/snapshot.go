package fsm

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// snapshotVersion is the version of dlmpb.FSMSnapshot this server writes.
const snapshotVersion = 1

// maxLastSession bounds the last session id of a snapshot: session ids are
// Raft indexes, which never get near it, and from above it the next id
// would wrap around to reuse old ones (as the lock table bounds its own
// counters).
const maxLastSession = 1 << 63

// snapshot is an encoded FSM state; it implements raft.FSMSnapshot.
type snapshot []byte

// Persist writes the snapshot to sink and closes it (or cancels it on error).
func (s snapshot) Persist(sink raft.SnapshotSink) error {
	if _, err := sink.Write(s); err != nil {
		_ = sink.Cancel()
		return fmt.Errorf("dlm server: write snapshot: %w", err)
	}
	return sink.Close()
}

// Release does nothing: the snapshot holds no resources.
func (snapshot) Release() {}

// marshal encodes the state deterministically. The caller holds f.mu.
func (f *FSM) marshal() ([]byte, error) {
	s := &dlmpb.FSMSnapshot{
		Version:     snapshotVersion,
		Table:       f.table.Snapshot(),
		LastSession: uint64(f.lastSession),
		Sessions:    make([]*dlmpb.SessionRecord, 0, len(f.sessions)),
		Members:     f.membersPB(),
	}
	for _, id := range sortedIDs(f.sessions) {
		rec := f.sessions[id]
		pr := &dlmpb.SessionRecord{
			Id:          uint64(id),
			TtlNanos:    int64(rec.ttl),
			SilentNanos: int64(rec.silent),
			Unheard:     rec.silent == 0 && !rec.silentAt.IsZero(),
			SeqFloor:    rec.floor,
			Owner:       rec.owner,
			ResumeHash:  rec.resumeHash,
			Replies:     make([]*dlmpb.Reply, len(rec.replies)),
		}
		for i, r := range rec.replies {
			pr.Replies[i] = r.pb()
		}
		for _, r := range rec.keyed {
			pr.Keyed = append(pr.Keyed, r.pb())
		}
		s.Sessions = append(s.Sessions, pr)
	}
	if len(f.metadata) > 0 {
		bySession := make(map[locktable.SessionID]*dlmpb.SessionRecord, len(s.Sessions))
		for _, pr := range s.Sessions {
			bySession[locktable.SessionID(pr.Id)] = pr
		}
		ids := make([]locktable.LockID, 0, len(f.metadata))
		for id := range f.metadata {
			ids = append(ids, id)
		}
		slices.Sort(ids)
		for _, id := range ids {
			li, _ := f.table.Describe(id)
			if pr := bySession[li.Session]; pr != nil {
				pr.Metadata = append(pr.Metadata, &dlmpb.LockMetadata{LockId: uint64(id), Data: f.metadata[id]})
			}
		}
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(s)
	if err != nil {
		return nil, fmt.Errorf("dlm server: encode snapshot: %w", err)
	}
	return b, nil
}

// restore decodes and checks a snapshot, then swaps it in; on error nothing
// changes.
func (f *FSM) restore(data []byte) error {
	var s dlmpb.FSMSnapshot
	if err := proto.Unmarshal(data, &s); err != nil {
		return fmt.Errorf("%w: %v", ErrMalformedSnapshot, err)
	}
	if s.GetVersion() != snapshotVersion {
		return fmt.Errorf("%w: version %d", ErrMalformedSnapshot, s.GetVersion())
	}
	if s.GetLastSession() >= maxLastSession {
		return fmt.Errorf("%w: last session id %d beyond 2^63", ErrMalformedSnapshot, s.GetLastSession())
	}
	table := locktable.New(f.limits)
	if err := table.Restore(s.GetTable()); err != nil {
		return fmt.Errorf("%w: %w", ErrMalformedSnapshot, err)
	}
	sessions, err := restoreSessions(&s, table)
	if err != nil {
		return err
	}
	members, err := restoreMembers(s.GetMembers())
	if err != nil {
		return err
	}
	metadata := make(map[locktable.LockID][]byte)
	for _, pr := range s.GetSessions() {
		var prev uint64
		for _, m := range pr.GetMetadata() {
			id := locktable.LockID(m.GetLockId())
			li, ok := table.Describe(id)
			if !ok || uint64(li.Session) != pr.GetId() || m.GetLockId() <= prev || len(m.GetData()) == 0 {
				return fmt.Errorf("%w: session %d: metadata of lock %d, not one of its live locks in order", ErrMalformedSnapshot, pr.GetId(), id)
			}
			prev = m.GetLockId()
			metadata[id] = m.GetData()
		}
	}

	f.mu.Lock()
	defer f.mu.Unlock()
	f.table = table
	f.sessions = sessions
	f.metadata = metadata
	f.members = members
	f.lastSession = locktable.SessionID(s.GetLastSession())
	f.applied = 0
	return nil
}

// restoreSessions checks the session records against the table: the same
// ids, increasing, none above the last id issued, and well-formed caches.
func restoreSessions(s *dlmpb.FSMSnapshot, table *locktable.Table) (map[locktable.SessionID]*sessionRecord, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformedSnapshot, fmt.Sprintf(format, args...))
	}
	if n := table.Stats().Sessions; n != len(s.GetSessions()) {
		return nil, bad("%d session records for %d sessions", len(s.GetSessions()), n)
	}
	out := make(map[locktable.SessionID]*sessionRecord, len(s.GetSessions()))
	restored := time.Now() // SessionMeta.SilentAt of the silences recorded
	var prev uint64
	for _, pr := range s.GetSessions() {
		id := pr.GetId()
		switch {
		case id <= prev:
			return nil, bad("session %d out of order", id)
		case id > s.GetLastSession():
			return nil, bad("session %d above last id %d", id, s.GetLastSession())
		case pr.GetTtlNanos() <= 0:
			return nil, bad("session %d ttl %d", id, pr.GetTtlNanos())
		case pr.GetSilentNanos() < 0 || pr.GetUnheard() && pr.GetSilentNanos() != 0:
			return nil, bad("session %d silent for %d ns (unheard %t)", id, pr.GetSilentNanos(), pr.GetUnheard())
		case len(pr.GetReplies()) > ReplyCacheSize:
			return nil, bad("session %d caches %d replies", id, len(pr.GetReplies()))
		case len(pr.GetResumeHash()) != 0 && len(pr.GetResumeHash()) != sha256.Size:
			return nil, bad("session %d resume hash of %d bytes", id, len(pr.GetResumeHash()))
		}
		if _, ok := table.Session(locktable.SessionID(id)); !ok {
			return nil, bad("session %d not in the table", id)
		}
		prev = id
		rec := &sessionRecord{ttl: time.Duration(pr.GetTtlNanos()), silent: time.Duration(pr.GetSilentNanos()), floor: pr.GetSeqFloor(), owner: pr.GetOwner(), resumeHash: pr.GetResumeHash()}
		if rec.silent > 0 || pr.GetUnheard() {
			rec.silentAt = restored
		}
		last := pr.GetSeqFloor()
		for _, r := range pr.GetReplies() {
			if r.GetSeq() <= last {
				return nil, bad("session %d reply %d out of order", id, r.GetSeq())
			}
			if _, ok := dlmpb.Status_name[int32(r.GetStatus())]; !ok {
				return nil, bad("session %d reply %d status %d", id, r.GetSeq(), r.GetStatus())
			}
			if _, ok := dlmpb.Reason_name[int32(r.GetReason())]; !ok {
				return nil, bad("session %d reply %d reason %d", id, r.GetSeq(), r.GetReason())
			}
			last = r.GetSeq()
			rec.replies = append(rec.replies, replyOf(r))
		}
		if len(pr.GetKeyed()) > ReplyCacheSize {
			return nil, bad("session %d caches %d keyed replies", id, len(pr.GetKeyed()))
		}
		for _, r := range pr.GetKeyed() {
			switch {
			case r.GetKey() == "" || r.GetSeq() != 0:
				return nil, bad("session %d keyed reply %q with seq %d", id, r.GetKey(), r.GetSeq())
			case !validReply(r):
				return nil, bad("session %d keyed reply %q status %d reason %d", id, r.GetKey(), r.GetStatus(), r.GetReason())
			}
			if _, dup := rec.lookupKey(r.GetKey()); dup {
				return nil, bad("session %d keyed reply %q twice", id, r.GetKey())
			}
			rec.keyed = append(rec.keyed, replyOf(r))
		}
		out[locktable.SessionID(id)] = rec
	}
	return out, nil
}

// pb is the snapshot form of r.
func (r reply) pb() *dlmpb.Reply {
	return &dlmpb.Reply{
		Seq:    r.seq,
		LockId: uint64(r.lock),
		Status: dlmpb.Status(r.status),
		Token:  r.token,
		Reason: r.reason,
		Digest: r.digest,
		Key:    r.key,
	}
}

// replyOf is the reply of snapshot form r.
func replyOf(r *dlmpb.Reply) reply {
	return reply{
		seq:    r.GetSeq(),
		lock:   locktable.LockID(r.GetLockId()),
		status: locktable.Status(r.GetStatus()),
		token:  r.GetToken(),
		reason: r.GetReason(),
		digest: r.GetDigest(),
		key:    r.GetKey(),
	}
}

// validReply reports whether r's status and reason are known values.
func validReply(r *dlmpb.Reply) bool {
	_, okStatus := dlmpb.Status_name[int32(r.GetStatus())]
	_, okReason := dlmpb.Reason_name[int32(r.GetReason())]
	return okStatus && okReason
}
