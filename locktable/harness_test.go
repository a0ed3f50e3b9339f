package locktable

import (
	"bytes"
	"errors"
	"slices"
	"testing"
)

// harness drives a Table and checks, after every operation, the table
// invariants (checkInvariants) and properties of the operation itself:
//
//   - a failed operation changes nothing (but the clock) and emits nothing;
//   - queued requests are granted only from a queue head, conversions
//     before new requests (FIFO), and a new request is granted at once only
//     if nothing is queued (no barging);
//   - fencing tokens strictly increase; a down-conversion keeps its token;
//   - blocking notices are not repeated for a mode already covered.
type harness struct {
	tb      testing.TB
	t       *Table
	idx     uint64
	now     int64
	acyclic bool // also check the wait-for graph has no cycle

	maxToken uint64
	notified map[LockID]uint8
	counts   map[string]int // outcomes seen, for coverage checks
}

func newHarness(tb testing.TB, lim Limits) *harness {
	return &harness{tb: tb, t: New(lim), notified: map[LockID]uint8{}, counts: map[string]int{}, acyclic: true}
}

// res is a Result with its events copied out of the table.
type res struct {
	Result
	err error
}

// stamp returns the stamp of the next operation.
func (h *harness) stamp() Stamp {
	h.idx++
	return Stamp{Index: h.idx, Now: h.now}
}

type modelQueues struct{ conv, wait []LockID }

// queues returns the current queues of every resource, by name.
func (h *harness) queues() map[string]*modelQueues {
	m := map[string]*modelQueues{}
	for name, r := range h.t.resources {
		mq := &modelQueues{}
		if r.q != nil {
			for l := r.q.conv.head; l != nil; l = l.link[linkQueue].next {
				mq.conv = append(mq.conv, l.id)
			}
			for l := r.q.wait.head; l != nil; l = l.link[linkQueue].next {
				mq.wait = append(mq.wait, l.id)
			}
		}
		m[name] = mq
	}
	return m
}

// snapshotNoClock snapshots the table with the clock zeroed.
func (h *harness) snapshotNoClock() []byte {
	now := h.t.now
	h.t.now = 0
	b := h.t.Snapshot()
	h.t.now = now
	return b
}

// do runs one operation and checks it. queueConv says whether a queued
// result goes to the conversion queue.
func (h *harness) do(queueConv bool, op func(Stamp) (Result, error)) res {
	h.tb.Helper()
	before := h.snapshotNoClock()
	model := h.queues()
	tokens := map[LockID]uint64{}
	for id, l := range h.t.locks {
		tokens[id] = l.token
	}

	r, err := op(h.stamp())
	out := res{Result: r, err: err}
	out.Events = slices.Clone(r.Events)
	h.count(out)

	if err != nil {
		if len(r.Events) != 0 || r.Status != StatusNone {
			h.tb.Fatalf("failed operation (%v) returned events %v", err, r.Events)
		}
		if after := h.snapshotNoClock(); !bytes.Equal(before, after) {
			h.tb.Fatalf("failed operation (%v) changed the table", err)
		}
	}
	h.checkEvents(model, tokens, out, queueConv)
	if err := checkInvariants(h.t, h.acyclic); err != nil {
		h.tb.Fatalf("invariant broken after %v: %v\nevents: %v", out.Status, err, out.Events)
	}
	return out
}

func (h *harness) checkEvents(model map[string]*modelQueues, tokens map[LockID]uint64, out res, queueConv bool) {
	h.tb.Helper()
	remove := func(s []LockID, id LockID) []LockID {
		if i := slices.Index(s, id); i >= 0 {
			return slices.Delete(s, i, i+1)
		}
		return s
	}
	for _, e := range out.Events {
		mq := model[e.Resource]
		if mq == nil {
			mq = &modelQueues{}
			model[e.Resource] = mq
		}
		switch e.Kind {
		case EventGranted:
			switch {
			case slices.Contains(mq.conv, e.Lock):
				if mq.conv[0] != e.Lock {
					h.tb.Fatalf("conversion of %d granted ahead of %v", e.Lock, mq.conv)
				}
				mq.conv = mq.conv[1:]
			case slices.Contains(mq.wait, e.Lock):
				if mq.wait[0] != e.Lock || len(mq.conv) > 0 {
					h.tb.Fatalf("request %d granted ahead of %v / conversions %v", e.Lock, mq.wait, mq.conv)
				}
				mq.wait = mq.wait[1:]
			case !e.Conversion:
				if len(mq.conv)+len(mq.wait) > 0 {
					h.tb.Fatalf("new request %d barged past %v / %v", e.Lock, mq.conv, mq.wait)
				}
			}
			old, existed := tokens[e.Lock]
			switch {
			case e.Token > h.maxToken:
				h.maxToken = e.Token
			case e.Conversion && existed && e.Token == old:
				// a down-conversion keeps its token
			default:
				h.tb.Fatalf("token %d of %v not above %d", e.Token, e, h.maxToken)
			}
			tokens[e.Lock] = e.Token
			delete(h.notified, e.Lock)
		case EventCancelled, EventTimedOut:
			mq.conv = remove(mq.conv, e.Lock)
			mq.wait = remove(mq.wait, e.Lock)
		case EventReleased:
			mq.conv = remove(mq.conv, e.Lock)
			delete(h.notified, e.Lock)
		case EventBlocking:
			n := h.notified[e.Lock]
			if e.Mode == 0 {
				if n != 0 {
					h.tb.Fatalf("repeated semaphore notice %v", e)
				}
				n = 1
			} else {
				if n&coverMask[e.Mode] != 0 {
					h.tb.Fatalf("repeated blocking notice %v (already %b)", e, n)
				}
				n |= modeBit(e.Mode)
			}
			h.notified[e.Lock] = n
		}
	}
	if out.Status == StatusGranted && out.Token != 0 && out.Token > h.maxToken {
		h.tb.Fatalf("result token %d above every event token", out.Token)
	}
	if out.Status == StatusQueued {
		l := h.t.locks[out.Lock]
		mq := model[l.res.name]
		if mq == nil {
			h.tb.Fatalf("queued on a resource that did not exist")
		}
		if queueConv {
			mq.conv = append(mq.conv, out.Lock)
		} else {
			mq.wait = append(mq.wait, out.Lock)
		}
	}
	actual := h.queues()
	for name, mq := range model {
		aq := actual[name]
		if aq == nil {
			aq = &modelQueues{}
		}
		if !slices.Equal(mq.conv, aq.conv) || !slices.Equal(mq.wait, aq.wait) {
			h.tb.Fatalf("resource %q: queues %v/%v, expected %v/%v after %v", name, aq.conv, aq.wait, mq.conv, mq.wait, out.Events)
		}
	}
}

// Operation wrappers.

func (h *harness) open(id SessionID) error {
	h.tb.Helper()
	r := h.do(false, func(st Stamp) (Result, error) { return Result{}, h.t.OpenSession(st, id, "") })
	return r.err
}

func (h *harness) close(id SessionID) res {
	h.tb.Helper()
	return h.do(false, func(st Stamp) (Result, error) { return h.t.CloseSession(st, id) })
}

func (h *harness) expire(ids ...SessionID) res {
	h.tb.Helper()
	return h.do(false, func(st Stamp) (Result, error) { return h.t.ExpireSessions(st, ids), nil })
}

func (h *harness) lock(req LockRequest) res {
	h.tb.Helper()
	return h.do(false, func(st Stamp) (Result, error) { return h.t.Lock(st, req) })
}

func (h *harness) acquire(req SemaphoreRequest) res {
	h.tb.Helper()
	return h.do(false, func(st Stamp) (Result, error) { return h.t.AcquirePermits(st, req) })
}

func (h *harness) convert(req ConvertRequest) res {
	h.tb.Helper()
	return h.do(true, func(st Stamp) (Result, error) { return h.t.Convert(st, req) })
}

func (h *harness) release(s SessionID, id LockID) res {
	h.tb.Helper()
	return h.do(false, func(st Stamp) (Result, error) { return h.t.Release(st, s, id) })
}

func (h *harness) cancel(s SessionID, id LockID) res {
	h.tb.Helper()
	return h.do(false, func(st Stamp) (Result, error) { return h.t.Cancel(st, s, id) })
}

func (h *harness) advance(now int64) res {
	h.tb.Helper()
	h.now = max(h.now, now)
	return h.do(false, func(st Stamp) (Result, error) { return h.t.Advance(st), nil })
}

// count records the outcome of an operation in h.counts.
func (h *harness) count(r res) {
	for _, sentinel := range []error{ErrInvalidMode, ErrInvalidArgument, ErrWouldBlock, ErrDeadlock,
		ErrUnknownSession, ErrSessionExists, ErrUnknownLock, ErrNotOwner, ErrNotGranted,
		ErrConversionPending, ErrNotPending, ErrKindMismatch, ErrCapacityMismatch,
		ErrNameTooLong, ErrTooManyLocks, ErrTooManyWaiters, ErrTooManyResources, ErrTooManySessions, ErrTooManyHolders} {
		if errors.Is(r.err, sentinel) {
			h.counts[sentinel.Error()]++
		}
	}
	if r.err == nil {
		h.counts["status "+r.Status.String()]++
	}
	for _, e := range r.Events {
		k := e.Kind.String()
		if e.Conversion {
			k += " conversion"
		}
		h.counts["event "+k]++
	}
}
