package fsm

import (
	"slices"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// ReplyCacheSize is how many answers each session remembers for idempotent
// retries: the most recent ReplyCacheSize request sequences, each with a
// digest of its request, plus the highest sequence number used (below it,
// a new number is refused as stale). It bounds the FSM's memory per
// session; it is part of the replicated behaviour, so every replica uses
// the same value.
const ReplyCacheSize = 32

// SessionMeta is what the server replicates about an open session beside
// the lock table: the leader needs the TTL to re-arm its expiry timers after
// a fail-over.
type SessionMeta struct {
	ID  locktable.SessionID
	TTL time.Duration
	// Owner is the identity that opened the session ("" without
	// authentication).
	Owner string
	// Recorded reports whether the log records a silence for the session
	// (CheckpointSessionsCmd): Silent as of SilentAt, possibly 0 (unheard
	// since a promotion). Not recorded: heard since, or never recorded.
	Recorded bool
	// Silent is how long the session had gone without a keepalive when a
	// leader last recorded it; 0 when it is not recorded, or recorded
	// unheard.
	Silent time.Duration
	// SilentAt is when this node applied that record (or restored it
	// from a snapshot), on its own clock: the session's silence has grown
	// at least by the time since, since the record was made before. Zero
	// when not recorded.
	SilentAt time.Time
}

// sessionRecord is the FSM's data about one open session.
type sessionRecord struct {
	owner      string // the identity that opened it ("" without authentication)
	ttl        time.Duration
	silent     time.Duration // its silence at the last checkpoint that recorded one (see SessionMeta)
	silentAt   time.Time     // when this node applied or restored silent (its clock; not replicated); zero: not recorded
	resumeHash []byte        // SHA-256 of its resume token; nil if opened by an older server
	floor      uint64        // highest sequence evicted from replies
	replies    []reply       // increasing seq, at most ReplyCacheSize
	keyed      []reply       // answers to keyed requests (Command.key), oldest first, at most ReplyCacheSize
}

// meta is the record's SessionMeta.
func (s *sessionRecord) meta(id locktable.SessionID) SessionMeta {
	return SessionMeta{ID: id, TTL: s.ttl, Owner: s.owner, Recorded: !s.silentAt.IsZero(), Silent: s.silent, SilentAt: s.silentAt}
}

// recordSilence applies a record of the session's silence made before
// now: silent > 0 is kept unless the silence this node counts from an
// earlier record is longer (a record never lowers it: each is a lower
// bound of the silence, and a leader started again counts less than the
// nodes that stayed up); silent <= 0 clears the record (heard).
func (s *sessionRecord) recordSilence(silent time.Duration, now time.Time) {
	switch {
	case silent <= 0:
		s.silent, s.silentAt = 0, time.Time{}
	case s.silentAt.IsZero() || silent >= s.silent+now.Sub(s.silentAt):
		s.silent, s.silentAt = silent, now
	}
}

// markUnheard records the session unheard from now on, unless it is
// recorded already.
func (s *sessionRecord) markUnheard(now time.Time) {
	if s.silentAt.IsZero() {
		s.silent, s.silentAt = 0, now
	}
}

// reply is a cached answer to request seq.
type reply struct {
	seq    uint64
	lock   locktable.LockID
	status locktable.Status
	token  uint64
	reason dlmpb.Reason
	digest uint64 // requestDigest of the request; 0 (older snapshots) matches any
	key    string // the request's key, for keyed replies (seq is 0)
}

// lookup returns the cached answer to seq.
func (s *sessionRecord) lookup(seq uint64) (reply, bool) {
	i, ok := slices.BinarySearchFunc(s.replies, seq, cmpSeq)
	if !ok {
		return reply{}, false
	}
	return s.replies[i], true
}

// highest is the highest sequence number the session has used: the last
// cached, or the last evicted when none is cached.
func (s *sessionRecord) highest() uint64 {
	if n := len(s.replies); n > 0 {
		return s.replies[n-1].seq
	}
	return s.floor
}

// remember caches r, evicting the lowest sequence beyond ReplyCacheSize.
// r.seq must be above highest.
func (s *sessionRecord) remember(r reply) {
	s.replies = append(s.replies, r)
	if len(s.replies) > ReplyCacheSize {
		s.floor = s.replies[0].seq
		s.replies = slices.Delete(s.replies, 0, 1)
	}
}

// lookupKey returns the cached answer to the request of key.
func (s *sessionRecord) lookupKey(key string) (reply, bool) {
	for _, r := range s.keyed {
		if r.key == key {
			return r, true
		}
	}
	return reply{}, false
}

// rememberKey caches r, the answer to a keyed request, evicting the oldest
// beyond ReplyCacheSize.
func (s *sessionRecord) rememberKey(r reply) {
	s.keyed = append(s.keyed, r)
	if len(s.keyed) > ReplyCacheSize {
		s.keyed = slices.Delete(s.keyed, 0, 1)
	}
}

// matches reports whether a request of digest d may be answered by r.
func (r reply) matches(d uint64) bool { return r.digest == 0 || r.digest == d }

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
