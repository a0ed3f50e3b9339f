// Package locktable is the lock table of dlm: a pure, deterministic state
// machine holding sessions, resources, locks and their queues.
//
// The same code runs inside the dlm server's Raft FSM and in process in the
// memory store. It reads no clock, starts no goroutine, does no I/O, uses no
// randomness and no global mutable state, and never depends on map
// iteration order: the outcome of an operation depends only on the table
// state and the operation's arguments. Time comes in through Stamp; effects
// come out as Events returned by each operation.
//
// # Locks
//
// A resource is a name (at most Limits.MaxNameLen bytes). It is either a
// lock resource, locked in the six DLM modes NL, CR, CW, PR, PW and EX of
// package driver (see driver.Compatible for the matrix), or a semaphore
// with a fixed number of permits (AcquirePermits). A resource exists only
// while it has a granted lock or a queued request; an idle one is deleted
// and takes no memory.
//
// Each resource has a granted set, a conversion queue and a wait queue:
//
//   - A new request is granted at once only if its mode is compatible with
//     every granted lock AND both queues are empty: nobody barges past a
//     waiter, so nobody starves. Otherwise it waits at the tail of the wait
//     queue (or fails: NoQueue, a passed deadline, a deadlock, a limit).
//   - A conversion of a granted lock to a mode that is "down" (compatible
//     with everything the old mode was, like EX→PR or PR→NL) is granted at
//     once and keeps its fencing token. Any other conversion is granted in
//     place, with a new token, if the new mode is compatible with every
//     other granted lock; otherwise it waits in the conversion queue while
//     the lock keeps its old mode.
//   - Queued conversions are served strictly in order and all go before
//     queued new requests, which are also served strictly in order.
//   - After every release, cancellation, down-conversion, timeout or
//     session end, requests are granted from the queue heads as far as
//     compatibility allows: the conversion queue first (a conversion is
//     compatible when its new mode is compatible with every other granted
//     lock), then, once it is empty, the wait queue. A run of compatible
//     requests (several PR) is granted in one operation.
//
// Every lock and request belongs to a session (ids chosen by the caller)
// and an owner within it, and has a LockID issued by the table. Release,
// Convert and Cancel check that the caller's session owns the lock. Ending
// a session (CloseSession, or ExpireSessions when the caller decided it is
// dead) releases its locks and cancels its requests; the table itself
// never decides that a session is dead.
//
// # Fencing tokens
//
// Every grant and every conversion other than a down-conversion gets a
// fencing token strictly greater than every token issued before, on any
// resource. The caller supplies a base with each operation (Stamp.Index,
// the Raft log index on the server), and each grant takes
// max(last token + 1, Stamp.Index). So one operation that grants several
// locks gives them distinct increasing tokens; a later operation's tokens
// are higher still, even if it passes the same or a smaller index; and with
// Raft indexes a token is never below the index of the entry that granted
// it. The last token is part of the snapshot, so tokens only grow across
// restarts and fail-over. Down-conversions keep their token: the holder's
// rights shrink, and a later incompatible grant gets a higher one.
// RaiseTokens lifts the sequence above a floor (at most MaxTokenFloor) and
// never lowers it: a state restored from an older copy uses it to stay
// above every token the copy's later history issued.
//
// # Time
//
// Stamp.Now (Unix nanoseconds, stamped by the Raft leader) drives the
// table clock, which is the maximum Now seen. Requests may carry a deadline;
// Advance times out every request whose deadline has passed and
// NextDeadline says when to call it next. A queue head whose deadline has
// passed is never granted, even before Advance runs.
//
// # Blocking notices
//
// When a request queues, every holder whose mode blocks it gets an
// EventBlocking carrying the wanted mode, so that it can release or
// down-convert cooperatively; a holder granted while requests it blocks are
// queued is told at once. Notices are deduplicated per holder lock: a
// holder already asked to yield to mode m is not asked again for a mode
// that yielding to m satisfies (an EX notice covers everything), until its
// own mode changes. Semaphore holders are told once per grant.
//
// # Deadlocks
//
// A request or conversion that would close a cycle in the wait-for graph of
// owners is refused with ErrDeadlock (a refused conversion leaves the lock
// in its old mode); so is an in-place conversion that would block a queued
// request whose owner its own owner waits on. See deadlock.go for the graph.
// Use one OwnerID per thread of control: an owner waiting on a lock it
// holds itself is a deadlock. Two limits are documented there: a semaphore
// request only waits on holders without whose permits it could never fit
// (waiting for "any" release is not modelled), and an owner with several
// requests pending at once can still be part of a cycle that a later grant
// closes. Deadlines resolve those.
//
// # Flags
//
// NoQueue turns a request or conversion into a try-lock (ErrWouldBlock
// instead of queueing). QueueConvert (VMS QUECVT) makes a conversion wait
// behind queued conversions instead of being granted in place, the remedy
// for the write starvation that in-place conversions can cause. Flags of
// the kernel DLM that were left out, on purpose: CONVDEADLK (demote to NL
// on conversion deadlock; the caller can convert to NL and retry),
// NOQUEUEBAST (notices on a failed try-lock; queue with a short deadline
// instead, so that refusals never carry side effects), EXPEDITE, HEADQUE
// and NOORDER (they break FIFO), PERSISTENT (locks outliving their
// session), NODLCKWT, and lock value blocks.
//
// # Snapshots and limits
//
// Snapshot encodes the whole state in a compact, versioned, canonical
// binary form: replaying the same operations gives byte-identical
// snapshots, and Restore of anything else (truncated, corrupted, trailing
// bytes, inconsistent state) fails with ErrMalformedSnapshot without
// panicking and without changing the table. Snapshot costs about a
// microsecond per lock. Limits bounds names, locks per session, waiters
// per resource, locks per resource, locks of the whole table, resources
// and sessions; limit errors match both their own sentinel and ErrLimit.
// Listings are paged: ResourcePage and SessionPage bound a page by locks
// as well, cutting a resource or session and going on from a position.
//
// # Use
//
// A Table is not safe for concurrent use: the caller serializes mutating
// operations (the Raft FSM does). The read-only methods (Describe,
// Resource, Resources, ResourcePage, Session, Sessions, SessionPage, Stats,
// NextDeadline, Snapshot, Now, LastToken, Limits) modify nothing and may run concurrently with
// each other. Operations return a Result whose Events slice is reused by
// the next mutating call; steady-state grant and release allocate nothing.
// An operation that returns an error changes nothing but the table clock
// and returns no events.
package locktable
