package server

import (
	"errors"
	"sync"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// errSlowClient ends a stream whose client does not read its events fast
// enough; errReplaced one whose session was resumed on another stream.
var (
	errSlowClient = errors.New("the client fell too far behind reading its stream; the session survives: resume it on a new stream")
	errReplaced   = errors.New("dlm server: the session was resumed on another stream")
)

// hub routes what the FSM applies to the session streams attached to this
// node: the answer to each request goes to the requesting session, every
// event to the session of the lock it concerns. Because it runs as the
// FSM's observer, every stream sees its messages in log order, an answer
// always before the later events of the same lock.
type hub struct {
	limit    int   // messages queued per stream
	maxBytes int64 // bytes queued per stream
	budget   *queueBudget

	mu    sync.Mutex
	boxes map[locktable.SessionID]sink
}

// sink is where the hub sends one session's messages: the outbox of its
// stream, or the mailbox of a session used through the unary API. Its
// methods are called under the hub's lock and never block.
type sink interface {
	// push queues messages, in log order.
	push(msgs ...*dlmpb.SessionResponse)
	// pushWarning queues a SessionWarning, unless one waits already.
	pushWarning(m *dlmpb.SessionResponse)
	// end ends the sink with err (nil: the session ended); drain lets
	// what is queued go out first.
	end(drain bool, err error)
}

func newHub(limit int, maxBytes int64, budget *queueBudget) *hub {
	return &hub{limit: limit, maxBytes: maxBytes, budget: budget, boxes: make(map[locktable.SessionID]sink)}
}

// attach gives session sid a new outbox, ending the one it had. Call it
// under FSM.View together with building the session's sync message, so that
// no applied event falls between the two.
func (h *hub) attach(sid locktable.SessionID) *outbox {
	ob := newOutbox(sid, h.limit, h.maxBytes, h.budget)
	h.mu.Lock()
	defer h.mu.Unlock()
	if old := h.boxes[sid]; old != nil {
		old.end(false, errReplaced)
	}
	h.boxes[sid] = ob
	return ob
}

// detach removes ob if it is still its session's outbox.
func (h *hub) detach(ob *outbox) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.boxes[ob.sid] == sink(ob) {
		delete(h.boxes, ob.sid)
	}
}

// mailbox returns the mailbox of session sid for the unary API, giving it
// one if it has none (ending its stream, if it has one: a session is
// served one way at a time, the latest).
func (h *hub) mailbox(sid locktable.SessionID) *mailbox {
	h.mu.Lock()
	defer h.mu.Unlock()
	old := h.boxes[sid]
	if mb, ok := old.(*mailbox); ok && mb.ended() == nil {
		return mb
	}
	if old != nil {
		old.end(false, errReplaced)
	}
	mb := newMailbox(sid)
	h.boxes[sid] = mb
	return mb
}

// endAll ends every stream (on loss of leadership or shutdown).
func (h *hub) endAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for sid, ob := range h.boxes {
		ob.end(false, err)
		delete(h.boxes, sid)
	}
}

// route sends each answer and event of an applied command to the stream of
// the session concerned.
func (h *hub) route(c *dlmpb.Command, r *fsm.Result) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var (
		sid   locktable.SessionID
		reply *dlmpb.SessionResponse
		skip  func(*locktable.Event) bool
	)
	sid, reply, skip = protocol.Answer(c, r)
	if reply == nil && len(r.Events) == 0 {
		return
	}
	if reply != nil {
		if ob := h.boxes[sid]; ob != nil {
			ob.push(reply)
		}
	}
	for i := range r.Events {
		e := &r.Events[i]
		ob := h.boxes[e.Session]
		if ob == nil || skip(e) {
			continue
		}
		switch e.Kind {
		case locktable.EventSessionExpired:
			ob.push(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Expired{Expired: &dlmpb.SessionExpired{Session: uint64(e.Session)}}})
			ob.end(true, nil)
			delete(h.boxes, e.Session)
		case locktable.EventSessionClosed:
			ob.push(&dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Closed{Closed: &dlmpb.SessionClosed{Session: uint64(e.Session)}}})
			ob.end(true, nil)
			delete(h.boxes, e.Session)
		default:
			ob.push(eventMessage(e))
		}
	}
}

// eventMessage turns a lock event into the message pushed to its session.
func eventMessage(e *locktable.Event) *dlmpb.SessionResponse {
	lock, mode := uint64(e.Lock), dlmpb.Mode(e.Mode)
	switch e.Kind {
	case locktable.EventGranted:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Granted{Granted: &dlmpb.Granted{
			LockId: lock, Token: e.Token, Mode: mode, Permits: e.Permits, Conversion: e.Conversion,
		}}}
	case locktable.EventBlocking:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Blocking{Blocking: &dlmpb.Blocking{
			LockId: lock, Mode: mode, Permits: e.Permits,
		}}}
	case locktable.EventReleased:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Released{Released: &dlmpb.Released{
			LockId: lock, Token: e.Token,
		}}}
	case locktable.EventCancelled:
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Cancelled{Cancelled: &dlmpb.Cancelled{
			LockId: lock, Mode: mode, Conversion: e.Conversion,
		}}}
	default: // EventTimedOut
		return &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_TimedOut{TimedOut: &dlmpb.TimedOut{
			LockId: lock, Mode: mode, Conversion: e.Conversion,
		}}}
	}
}
