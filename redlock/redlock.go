// Package redlock is the dlm store for N independent Redis masters: the
// Redlock algorithm, with fencing tokens.
//
// # Nodes and quorum
//
// Each client given to New addresses one master; the masters know nothing of
// each other (no replication, no cluster between them). A lock is granted
// when a quorum of N/2+1 nodes grant it, so the store tolerates (N-1)/2
// failed nodes. Use an odd N of at least 3, usually 3 or 5: an even N
// tolerates no more failures than N-1 nodes do, and N < 3 tolerates none.
//
// Every client must be built with ContextTimeoutEnabled, so that a call gives
// up at the per-node timeout instead of the client's read timeout; New
// reports a client without it (among go-redis's own client types) as
// ErrInvalid on every call. MaxRetries: -1 and DialerRetries: 1 are
// advised: package dlm retries whole attempts with jittered backoff, and a
// dead node then costs one refused dial instead of the per-node timeout.
//
// # One attempt
//
// Acquire sends the acquire script to every node at once, each call bounded
// by the per-node timeout (by default a tenth of the TTL, at most 250 ms;
// see WithNodeTimeout). It counts the answers as they arrive and succeeds
// as soon as a quorum has granted, if the validity left, TTL - elapsed -
// drift (drift = TTL × 0.01 + 2 ms by default, see WithDriftFactor), is
// positive. It never waits for the other nodes: their calls go on, even if
// the caller's context ends, and finish within the per-node timeout.
//
// It fails as soon as a quorum can no longer be reached, and then releases
// the lock on every node that granted it or gave no answer, each right
// after that node's own answer or timeout, before returning: nothing of a
// failed attempt is left on a node that could be reached. (A call that
// timed out may still reach its node later and set the lock there; that
// stray lock, on a minority, expires with its TTL.) When the caller's
// context ends during an attempt, Acquire fails with an error wrapping the
// context's, after the same cleanup.
//
// # Waiting: a wait list on every node
//
// The store is a driver.Waiter: package dlm makes one attempt, and on
// contention calls AcquireWait, which queues on every node. Each node
// keeps, per resource, a wait list: the waiters' tickets (a sorted set),
// their liveness deadlines by the node's clock (a second sorted set) and
// their requests (a hash). A
// waiter's ticket is the client's clock in microseconds when AcquireWait
// began, the same on every node and kept across its attempts, so that
// every node orders the waiters alike. A node grants only to the head of
// its live wait list, or to anyone when the list is empty: the acquire
// script reads the list in the same call as it reads and sets the lock, so
// an attempt is still one script call per node, and when nobody waits the
// list costs one EXISTS. The scripts that concurrent calls send to one node
// while another is in flight there go together in one pipeline once it has
// answered (a call alone goes at once): under load a node reads and
// answers many calls per system call, which costs it less than the
// scripts add over a plain SET NX. A new request, and a releaser that asks
// again, are refused wherever someone waits, and queue behind them.
//
// A waiter's attempt asks every node at once, as Acquire does, and puts
// the waiter in the wait list of each node that does not grant (or
// refreshes its place there), with its request (TTL and metadata). A
// release, on each node, hands the freed lock to the head of that node's
// list: the node sets the lock for the head, with the head's TTL and
// metadata and a new token, as the head's own attempt would have, takes
// it out of the list, and pushes "token, the node's clock" to the head's
// own wake-up list, which the waiter pops on every node (one blocking pop
// per node while it waits). A waiter handed the lock by a quorum of nodes
// holds it, without asking the nodes again: a handoff costs one release
// and a pop, where an attempt after a wake-up costs a further script on
// every node. A node that cannot hand over (see Restart guard) wakes the
// head instead, as does a refused attempt that found the lock free there;
// a woken waiter attempts again. A waiter whose handovers do not reach a
// quorum within the per-node timeout attempts again too: its attempt is
// granted where it was handed the lock (an owner that holds the lock is
// granted again, its TTL set anew) and asks the rest. Without either a
// waiter attempts again every queue refresh interval (WithQueueRefresh,
// 500 ms by default), which also keeps its place alive; a node drops a
// waiter whose place was not refreshed for four intervals. A successful
// waiter leaves the lists of the nodes that did not grant; a failed
// attempt keeps its place on the nodes that granted (it releases the lock
// there and stays queued); a waiter whose context ends leaves every list
// and frees the lock where it was handed over, which hands it on to the
// next.
//
// Mutual exclusion is Redlock's, unchanged. A handover is the head's SET
// NX, run by the node on its behalf at the moment the lock is free there;
// the wait list only adds a reason for a node to refuse an attempt; and
// the scripts that change the lists delete no lock but the caller's own.
// So any run of this store is a run of plain Redlock in which some
// requests were made by the nodes and some nodes refused more often: a
// grant still needs the lock set for the owner on a quorum, two quorums
// share a node, and a node holds one lock at a time. What a handover must
// keep is Redlock's validity, TTL - elapsed - drift counted from a moment
// no later than the lock was set on each node of the quorum. The waiter
// does not see that moment; it dates it from its own last attempt on the
// node, whose reply carries the node's clock: the node ran that attempt
// after the waiter sent it, so it set the lock no earlier than the send
// plus the node's elapsed time between the two, shortened by the drift
// factor for a clock that runs fast. A handover counts only when it came
// after the waiter's last attempt and last undo on that node (by the
// node's clock), since an undo may have freed the lock since, and never
// from a node whose undo went unanswered. The fencing argument below
// holds as it stands: a handover raises the node's counter as a grant
// does, after the release has raised it to the holder's token.
//
// One difference from Redlock's own clients remains. They set a fresh
// random value at each attempt; this store's lock value is the owner's,
// the same across a waiter's attempts and package dlm's retries. So an
// undo (the release of a failed attempt) that the client gave up on at
// the per-node timeout, but that reaches its node later still, after the
// same owner's next attempt was granted there, deletes that grant, which
// the owner counts. A waiter ignores handovers from a node whose undo went
// unanswered, but not its attempts' grants there (ignoring those too kept
// a waiter at the head of every list from ever reaching a quorum once a
// few undos had gone unanswered). Where a call can reach a node more than
// the per-node timeout after it was sent, raise the timeout
// (WithNodeTimeout) or use the dlm server.
//
// Nor can the wait lists deadlock: a waiter holds nothing while it waits
// (a place in a list is not a lock), and every place lapses unless its
// waiter refreshes it. Nodes may briefly disagree on the head (a
// registration still on its way, a node that lost its list): a waiter
// handed or granted the lock on a minority then undoes that and stays
// queued, and the nodes hand the lock to, or wake, their heads. Since every
// live waiter registers again at each attempt, with the same ticket, a
// node that restarted empty or was flushed has the waiters back in order
// within one refresh interval, and meanwhile grants nothing that counts: a
// request it lets through still needs a quorum, and the other nodes refuse
// it while waiters are queued there. The live waiter with the smallest
// ticket thus becomes the head of every node it can reach, and is granted
// once the lock is free on a quorum. A waiter that died holds the others
// back for at most four refresh intervals, unless a release handed it the
// lock before its place lapsed: then, like a holder that dies, it holds
// the lock until its TTL runs out on those nodes.
//
// The grants go in ticket order: first come, first served by the clients'
// clocks. Clocks that differ between client machines reorder waiters that
// arrive closer together than the difference; that costs fairness, never
// safety. A call that does not wait (dlm.WithWait(0)) never queues.
//
// Extend resets the TTL on every node where the owner holds the lock and
// succeeds when a quorum did so within the validity. It also sets the lock
// again on a node that has lost it (restarted without persistence, flushed,
// or expired there after a missed extend); such a node does not count
// towards the quorum of that call, only of later ones. Release goes to every
// node, to each only after the grant's earlier calls to it have answered or
// timed out, so that a late acquire or extend cannot set the lock again
// behind it; it returns as soon as a quorum released (or the answers
// decide), at most twice the per-node timeout, and the other nodes'
// releases go on without the caller, as an acquisition's calls to the
// nodes beyond its quorum do. When a node handed the lock over or woke a
// waiter, it waits for every node's answer, so that the releaser, which
// often asks again at once, does not race the waiter for the cores.
//
// # Errors
//
// A failed attempt is contention (driver.ErrTaken) unless fewer than a
// quorum of nodes gave an answer, which is driver.ErrUnavailable: a node
// that is down, timed out or inside the restart guard gives no answer. So a
// split vote, or contention with a tolerable number of nodes down, is
// ErrTaken; too many nodes down is ErrUnavailable whatever the others said.
// A quorum that granted too late (no validity left) is ErrUnavailable too.
// The ErrUnavailable errors join one *NodeError per silent node, naming
// its index and address.
//
// Extend returns driver.ErrNotHeld when more than N - quorum nodes answered
// that the owner does not hold the lock there (another owner, or missing),
// after releasing the owner's keys everywhere; and ErrUnavailable when the
// answers cannot decide. Release returns nil when a quorum released the
// lock, driver.ErrNotHeld when more than N - quorum nodes answered that it
// was not the owner's (expired or taken), and ErrUnavailable otherwise.
//
// # Fencing tokens
//
// Each node keeps a token counter per resource, raised by one at each
// grant and floored at the node's clock in microseconds. A grant's token
// is the largest counter among the quorum that granted it, and a release
// raises every node's counter to the holder's token. Two successive holders' quorums share a node, so the
// next holder's token is larger than the previous one's provided that, on
// that shared node:
//
//   - the previous lock was released there (the release raised the
//     counter), or it expired there and no node's clock ran ahead of that
//     node's by the TTL or more;
//   - the counter survived in between, or the node's clock has passed the
//     previous token: a node restarted without persistence or flushed
//     counts again only after the restart guard, by which time its clock
//     has; without the guard such a node breaks Redlock's mutual exclusion
//     itself;
//   - the node's clock did not step back, and the counter key did not
//     expire (see WithFenceRetention).
//
// Outside these conditions a later holder may get a smaller token. Tokens
// of different resources are not comparable. A repeated Acquire by an owner
// that holds the lock returns the largest counter of its new quorum, which
// may differ from its first token. Where fencing must hold whatever the
// clocks and restarts, use the dlm server, whose tokens come from its Raft
// log.
//
// # Restart guard
//
// A node restarted without persistence forgets its locks; if it voted at
// once, a second owner could win a quorum with it. The Redlock description
// asks such a node to stay out for the longest TTL in use. WithRestartGuard
// does so: each node keeps a birth marker (a key without expiry, written
// when missing), read in the same round trip as every acquire and extend;
// a node whose marker is younger than the guard, by its own clock, does not
// vote. The marker is written on the first call after a restart, a flush or
// the node's first use, so the guard also covers a flush, and a new node
// waits one guard before it votes. Without the guard (the default), run the
// nodes with persistence (appendonly, fsync always) or restart them only
// after the longest TTL in use.
//
// With the guard, releases wake the head of the wait list instead of
// handing it the lock: the release script cannot read the marker (another
// key, which a Redis Cluster client may not reach from the same script),
// so a node inside its guard would hand over what it may not grant. The
// woken waiter's attempt is guarded as every attempt is. A handoff then
// costs the attempt after the wake-up again.
//
// # Elections
//
// Inspect reads one resource on every node at once and shows the owner
// that holds it on a quorum; Relabel changes the holder's metadata on a
// quorum, versioned so that readers see the newest: what dlm.Election
// needs to say who leads and with what value. The store has no Watch (the
// nodes share no channel, and a quorum of them would have to agree on
// every notice): package dlm polls Inspect instead, every poll interval of
// its own (1 s by default), which bounds how long a change goes unseen.
// Nor does it tell a holder that someone waits (no Grant.Blocking, no
// driver.FeatureBlocking), and Inspect and List show no waiters: the wait
// lists are per node, and no quorum of nodes vouches for them.
//
// Requires Redis 6.2 or later. Only exclusive (EX) locks are provided.
package redlock

import (
	"fmt"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/driver/alarm"
	"github.com/dlmhq/dlm/internal/redislua"
)

// Store is a dlm store over N independent Redis masters. It implements
// driver.Driver, driver.Waiter, driver.Lister, driver.Inspector and
// driver.Relabeler. It
// is safe for concurrent use.
type Store struct {
	nodes       []*node
	quorum      int
	timeout     time.Duration // per-node timeout; 0 picks it from the TTL
	driftFactor float64
	prefix      string
	retention   time.Duration
	guard       time.Duration // restart guard; 0 is off
	refresh     time.Duration // how often a waiter refreshes its place
	sequential  bool          // ask the nodes one by one (benchmarks only)
	bad         error         // a configuration error reported by every call
	clock       alarm.Clock   // the rounds' per-node deadlines
}

// New returns a store over clients, one per Redis master, in a fixed order:
// errors name a node by its index in clients. Configuration errors
// (no clients, a nil or duplicated client, a client without
// ContextTimeoutEnabled, a bad option) are returned by every call as
// driver.ErrInvalid.
func New(clients []goredis.UniversalClient, opts ...Option) *Store {
	s := &Store{
		driftFactor: DefaultDriftFactor,
		prefix:      DefaultPrefix,
		retention:   DefaultFenceRetention,
		refresh:     DefaultQueueRefresh,
		quorum:      len(clients)/2 + 1,
	}
	for _, o := range opts {
		o(s)
	}
	s.bad = s.validate()
	seen := make(map[string]int, len(clients))
	for i, c := range clients {
		if c == nil {
			s.fault(fmt.Errorf("%w: redlock client %d is nil", driver.ErrInvalid, i))
			continue
		}
		n := newNode(i, c)
		if j, dup := seen[n.addr]; dup {
			s.fault(fmt.Errorf("%w: redlock clients %d and %d address the same server %s", driver.ErrInvalid, j, i, n.addr))
		}
		seen[n.addr] = i
		if !n.ctxTimeouts {
			s.fault(fmt.Errorf("%w: redlock client %d (%s) must set ContextTimeoutEnabled for per-node timeouts", driver.ErrInvalid, i, n.addr))
		}
		s.nodes = append(s.nodes, n)
	}
	if len(clients) == 0 {
		s.fault(fmt.Errorf("%w: redlock needs at least one Redis client (3 or 5 advised)", driver.ErrInvalid))
	}
	return s
}

func (s *Store) validate() error {
	switch {
	case strings.ContainsAny(s.prefix, "{}"):
		return fmt.Errorf("%w: redlock key prefix %q contains a brace", driver.ErrInvalid, s.prefix)
	case s.timeout < 0:
		return fmt.Errorf("%w: redlock node timeout %s is negative", driver.ErrInvalid, s.timeout)
	case !(s.driftFactor >= 0 && s.driftFactor < 0.5):
		return fmt.Errorf("%w: redlock drift factor %v is outside [0, 0.5)", driver.ErrInvalid, s.driftFactor)
	case s.retention < time.Minute:
		return fmt.Errorf("%w: redlock fence retention %s is below one minute", driver.ErrInvalid, s.retention)
	case s.refresh < time.Millisecond:
		return fmt.Errorf("%w: redlock queue refresh %s is below one millisecond", driver.ErrInvalid, s.refresh)
	case s.guard < 0:
		return fmt.Errorf("%w: redlock restart guard %s is negative", driver.ErrInvalid, s.guard)
	}
	return nil
}

// fault records the first configuration error.
func (s *Store) fault(err error) {
	if s.bad == nil {
		s.bad = err
	}
}

// Name returns "redlock".
func (s *Store) Name() string { return "redlock" }

// check rejects calls on a misconfigured store and modes other than EX.
func (s *Store) check(req driver.Request) error {
	if s.bad != nil {
		return s.bad
	}
	if req.Mode != driver.EX {
		return fmt.Errorf("%w: the redlock store has only EX locks, not %s", driver.ErrUnsupported, req.Mode)
	}
	return nil
}

func (s *Store) keys(req driver.Request) redislua.Keys {
	return redislua.KeysFor(s.prefix, req.Resource, req.Owner)
}

// nodeTimeout is the bound on each node's call for a lock of the given TTL.
func (s *Store) nodeTimeout(ttl time.Duration) time.Duration {
	if s.timeout > 0 {
		return s.timeout
	}
	return min(DefaultNodeTimeout, max(ttl/10, time.Millisecond))
}

// drift is the allowance for clock drift between the client and the nodes.
// Drift returns the store's allowance for clock drift, TTL × the drift
// factor + 2 ms; package dlm subtracts it from every lease's validity.
func (s *Store) Drift(ttl time.Duration) time.Duration { return s.drift(ttl) }

func (s *Store) drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*s.driftFactor) + minDrift
}

// bornKey is the node's birth marker, read by the restart guard. Lock keys
// always hold a brace, so it cannot collide with one.
func (s *Store) bornKey() string { return s.prefix + "redlock:born" }
