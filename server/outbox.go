package server

import (
	"sync"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// outbox queues the messages of one session stream, in the order the FSM
// produced them, for the stream's writer. Pushing never blocks (the FSM's
// observer pushes); an outbox that grows past its limit is closed, and the
// client resumes its session on a new stream.
type outbox struct {
	sid   locktable.SessionID
	limit int

	mu    sync.Mutex
	msgs  []*dlmpb.SessionResponse
	wake  chan struct{} // capacity 1: something was pushed or the outbox ended
	ended bool
	drain bool  // when ended: send what is queued first
	err   error // why it ended; nil for a normal end (closed, expired)
}

func newOutbox(sid locktable.SessionID, limit int) *outbox {
	return &outbox{sid: sid, limit: limit, wake: make(chan struct{}, 1)}
}

// push queues messages; it does nothing once the outbox has ended.
func (o *outbox) push(ms ...*dlmpb.SessionResponse) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ended {
		return
	}
	if len(o.msgs)+len(ms) > o.limit {
		o.endLocked(false, errSlowClient)
		return
	}
	o.msgs = append(o.msgs, ms...)
	o.signal()
}

// end ends the outbox: with drain, the writer still sends what is queued.
// Only the first end counts.
func (o *outbox) end(drain bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.endLocked(drain, err)
}

func (o *outbox) endLocked(drain bool, err error) {
	if o.ended {
		return
	}
	o.ended, o.drain, o.err = true, drain, err
	if !drain {
		o.msgs = nil
	}
	o.signal()
}

func (o *outbox) signal() {
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// take returns the queued messages (swapping buf in as the new queue) and
// whether the outbox has ended; after an end without drain it returns no
// messages.
func (o *outbox) take(buf []*dlmpb.SessionResponse) (msgs []*dlmpb.SessionResponse, ended bool, err error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	msgs, o.msgs = o.msgs, buf[:0]
	return msgs, o.ended, o.err
}
