package redlock

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dlmhq/dlm/driver"
)

// waiter is one AcquireWait call's place in the nodes' wait lists, and what
// its calls learnt of each node's clock, with which it dates the locks
// that releases hand it.
type waiter struct {
	ticket  string // the same on every node: its order among the waiters
	request string // "ttl metadata": what a node needs to hand it the lock

	mu    sync.Mutex
	nodes []nodeView // by node index
}

// nodeView is what a waiter knows of one node.
type nodeView struct {
	sent   time.Time // when the waiter sent the attempt that read clock
	clock  uint64    // the node's clock (µs) when it ran that attempt; 0: none answered
	since  uint64    // the node's clock at the waiter's last attempt or undo there
	broken bool      // an undo there went unanswered: handovers from it do not count
	handed handover  // the node's last handover to the waiter (zero: none)
}

// handover is a node's message that a release handed the lock to the
// waiter: the token it granted and its clock (µs) when it did.
type handover struct {
	token, at uint64
}

// notice is what a listener popped from one node's wake-up list: a
// handover, or a wake-up when handover is nil.
type notice struct {
	node     int
	handover *handover
}

func (s *Store) newWaiter(req driver.Request) *waiter {
	return &waiter{
		ticket:  strconv.FormatInt(time.Now().UnixMicro(), 10),
		request: strconv.FormatInt(req.TTL.Milliseconds(), 10) + " " + req.Metadata,
		nodes:   make([]nodeView, len(s.nodes)),
	}
}

// parseHandover reads a handover, "<token> <µs>", from a wake-up list; any
// other message is a wake-up.
func parseHandover(msg string) *handover {
	tok, at, ok := strings.Cut(msg, " ")
	if !ok {
		return nil
	}
	token, err1 := strconv.ParseUint(tok, 10, 64)
	clock, err2 := strconv.ParseUint(at, 10, 64)
	if err1 != nil || err2 != nil {
		return nil
	}
	return &handover{token: token, at: clock}
}

// answered records that node i ran an attempt sent at sent when its clock
// read clock.
func (w *waiter) answered(i int, sent time.Time, clock uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := &w.nodes[i]
	v.sent, v.clock, v.since = sent, clock, max(v.since, clock)
}

// undone records the undo of an attempt on node i, which the node ran when
// its clock read clock, or which failed with err.
func (w *waiter) undone(i int, clock uint64, err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	v := &w.nodes[i]
	if err != nil {
		v.broken = true
		return
	}
	v.since = max(v.since, clock)
}

// handedOver records a handover from node i.
func (w *waiter) handedOver(i int, h handover) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.nodes[i].handed = h
}

// grant returns the grant that the handovers make when they come from a
// quorum of nodes, with validity left; late reports a quorum without
// validity left.
//
// A handover counts only if it came after the waiter's last attempt and
// undo on that node (by the node's clock), since either may have freed
// the lock; and only from a node that answered an attempt, whose answer
// dates the handover for the waiter: the node ran that attempt no earlier
// than the waiter sent it, so it handed the lock over no earlier than
// sent + (at - clock), the node's elapsed time shortened by the drift
// factor for a clock that runs fast. The grant's Start is the earliest of
// these moments, and its token the largest of the handovers'.
func (w *waiter) grant(quorum int, ttl, drift time.Duration, rate float64) (g driver.Grant, ok, late bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var start time.Time
	var token uint64
	count := 0
	for _, v := range w.nodes {
		h := v.handed
		if h.at == 0 || v.broken || v.clock == 0 || h.at <= v.since {
			continue
		}
		at := v.sent.Add(time.Duration(float64(h.at-v.clock) * (1 - rate) * float64(time.Microsecond)))
		if count == 0 || at.Before(start) {
			start = at
		}
		token = max(token, h.token)
		count++
	}
	switch {
	case count < quorum:
		return driver.Grant{}, false, false
	case ttl-time.Since(start)-drift <= 0:
		return driver.Grant{}, false, true
	}
	return driver.Grant{Token: token, Handle: &lease{}, Start: start}, true, false
}
