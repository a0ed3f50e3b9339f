package server

import (
	"slices"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// ReplyCacheSize is how many answers each session remembers for idempotent
// retries: the most recent ReplyCacheSize request sequences. It bounds the
// FSM's memory per session; it is part of the replicated behaviour, so every
// replica uses the same value.
const ReplyCacheSize = 32

// SessionMeta is what the server replicates about an open session beside
// the lock table: the leader needs the TTL to re-arm its expiry timers after
// a fail-over.
type SessionMeta struct {
	ID  locktable.SessionID
	TTL time.Duration
}

// sessionRecord is the FSM's data about one open session.
type sessionRecord struct {
	owner   string // the identity that opened it ("" without authentication)
	ttl     time.Duration
	floor   uint64  // highest sequence evicted from replies
	replies []reply // increasing seq, at most ReplyCacheSize
}

// reply is a cached answer to request seq.
type reply struct {
	seq    uint64
	lock   locktable.LockID
	status locktable.Status
	token  uint64
	reason dlmpb.Reason
}

// lookup returns the cached answer to seq.
func (s *sessionRecord) lookup(seq uint64) (reply, bool) {
	i, ok := slices.BinarySearchFunc(s.replies, seq, cmpSeq)
	if !ok {
		return reply{}, false
	}
	return s.replies[i], true
}

// remember caches r, evicting the lowest sequence beyond ReplyCacheSize.
// r.seq must be above floor and not cached yet.
func (s *sessionRecord) remember(r reply) {
	i, _ := slices.BinarySearchFunc(s.replies, r.seq, cmpSeq)
	s.replies = slices.Insert(s.replies, i, r)
	if len(s.replies) > ReplyCacheSize {
		s.floor = s.replies[0].seq
		s.replies = slices.Delete(s.replies, 0, 1)
	}
}

func cmpSeq(r reply, seq uint64) int {
	switch {
	case r.seq < seq:
		return -1
	case r.seq > seq:
		return 1
	}
	return 0
}

// result turns a cached reply into a duplicate Result.
func (r reply) result(index uint64, sid locktable.SessionID) Result {
	return Result{
		Index:     index,
		Session:   sid,
		Lock:      r.lock,
		Status:    r.status,
		Token:     r.token,
		Err:       ErrorOf(r.reason),
		Duplicate: true,
	}
}
