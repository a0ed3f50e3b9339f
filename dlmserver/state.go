package dlmserver

import (
	"context"
	"runtime"
	"sync"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// state is the store's view of its session, guarded by Store.mu.
type state struct {
	sid        uint64        // 0 while no session is open
	resume     []byte        // the session's resume token (secret: never logged), sent to resume it
	ttl        time.Duration // the session TTL the server granted
	validUntil time.Time     // the session is certainly alive before it
	conn       *streamConn   // the stream in use; nil while disconnected
	lastAck    time.Time     // when the last keepalive ack (or the stream) came
	// storage is the last ErrStorage a server answered since a keepalive
	// was last acknowledged, or nil: a call that cannot be sent, or a
	// session lost, names it (the disk of the node is full or failing).
	storage   error
	closing   bool
	lossTimer *time.Timer

	seq       uint64               // last request sequence
	kaSeq     uint64               // last keepalive sequence
	kaSent    map[uint64]time.Time // keepalives awaiting an ack, by seq
	calls     map[uint64]*call     // requests awaiting their first answer
	locks     map[uint64]*lockState
	byOwner   map[string]*lockState
	groups    map[string]*group // by driver.Request.Group
	nextOwner uint64
}

func (st *state) init() {
	st.kaSent = make(map[uint64]time.Time)
	st.calls = make(map[uint64]*call)
	st.locks = make(map[uint64]*lockState)
	st.byOwner = make(map[string]*lockState)
	st.groups = make(map[string]*group)
}

// group is the owner id in the session of a driver.Request.Group: every
// acquisition of the group is that one owner in the server's wait-for
// graph. It is kept while the group has an acquisition in the store.
type group struct {
	owner uint64
	n     int // acquisitions of the group not forgotten yet
}

// ownerFor returns the owner id of a new acquisition of group name: a
// fresh one without a group, else the group's, which the acquisition
// joins.
func (st *state) ownerFor(name string) uint64 {
	if name == "" {
		st.nextOwner++
		return st.nextOwner
	}
	g := st.groups[name]
	if g == nil {
		st.nextOwner++
		g = &group{owner: st.nextOwner}
		st.groups[name] = g
	}
	g.n++
	return g.owner
}

// leave takes an acquisition that is forgotten out of its group, and
// forgets the group once it has none left.
func (st *state) leave(ls *lockState) {
	if ls.group == "" {
		return
	}
	if g := st.groups[ls.group]; g != nil {
		if g.n--; g.n <= 0 {
			delete(st.groups, ls.group)
		}
	}
}

// streamConn is one session stream. Messages are queued and sent by the
// stream's writer goroutine, so that nobody blocks on gRPC flow control while
// holding Store.mu.
type streamConn struct {
	stream sessionStream
	ctx    context.Context // the stream's; cancel ends it
	cancel context.CancelFunc
	done   chan struct{} // closed when its receive loop has ended
	// coalesce: the writer yields before taking the queue, for the stream
	// whose every Flush is a write (the session transport's).
	coalesce bool

	mu   sync.Mutex
	q    []*dlmpb.SessionRequest
	wake chan struct{} // capacity 1
}

func newStreamConn(ctx context.Context, cancel context.CancelFunc, stream sessionStream) *streamConn {
	_, coalesce := stream.(*sessionConn)
	return &streamConn{stream: stream, ctx: ctx, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1), coalesce: coalesce}
}

// send queues m for the writer; it never blocks.
func (c *streamConn) send(m *dlmpb.SessionRequest) {
	c.mu.Lock()
	c.q = append(c.q, m)
	c.mu.Unlock()
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// write sends the queued messages in order until the stream ends; a send
// error cancels the stream, which its receive loop then reports.
func (c *streamConn) write() {
	var buf []*dlmpb.SessionRequest
	for {
		c.mu.Lock()
		buf, c.q = c.q, buf[:0]
		c.mu.Unlock()
		for _, m := range buf {
			if err := c.stream.Send(m); err != nil {
				c.cancel()
				return
			}
		}
		if len(buf) > 0 {
			if err := c.stream.Flush(); err != nil {
				c.cancel()
				return
			}
		}
		clear(buf)
		select {
		case <-c.wake:
			if c.coalesce {
				// Let the callers that are ready queue their requests too:
				// one write for them all rather than one each (nothing
				// else runs, nothing waits, on a quiet client).
				runtime.Gosched()
			}
		case <-c.ctx.Done():
			return
		}
	}
}

// lockState is one acquisition: a lock or semaphore request of this store,
// from the moment it is sent until it is released, refused or lost.
type lockState struct {
	owner    uint64 // the acquisition's owner id in the session (its group's, if any)
	ownerKey string // the driver's owner value
	group    string // the driver's group, "" for none
	resource string

	id      uint64 // the server's lock id; 0 until an answer names it
	granted bool
	mode    dlmpb.Mode
	token   uint64
	waiter  *call         // a queued lock request or conversion awaiting its grant
	lost    chan struct{} // closed when the lock is gone without our release
	gone    bool

	blocking chan struct{} // closed when a conflicting request queues behind the grant
	blocked  bool          // blocking is closed
}

// newLockState returns the state of a new acquisition of req by owner.
func newLockState(owner uint64, req driver.Request) *lockState {
	return &lockState{owner: owner, ownerKey: req.Owner, group: req.Group, resource: req.Resource,
		lost: make(chan struct{}), blocking: make(chan struct{})}
}

// block closes the grant's blocking channel, once: the server told the
// holder that a request it blocks waits.
func (ls *lockState) block() {
	if !ls.blocked {
		ls.blocked = true
		close(ls.blocking)
	}
}

// setMode records the mode the server granted. A granted lock whose mode
// changes gets a fresh blocking channel: the server tells the holder again
// about its new mode, and what blocked the old one may not block it.
func (ls *lockState) setMode(m dlmpb.Mode) {
	if m == dlmpb.Mode_MODE_UNSPECIFIED || m == ls.mode {
		return
	}
	if ls.granted && ls.mode != dlmpb.Mode_MODE_UNSPECIFIED {
		ls.blocking, ls.blocked = make(chan struct{}), false
	}
	ls.mode = m
}

// callKind is the kind of a request.
type callKind uint8

const (
	callLock callKind = iota + 1
	callConvert
	callRelease
	callCancel
	callRelabel
)

// call is a request awaiting its outcome.
type call struct {
	kind      callKind
	seq       uint64
	msg       *dlmpb.SessionRequest // sent again after a reconnect
	lock      *lockState
	mode      dlmpb.Mode // convert: the target mode
	from      dlmpb.Mode // convert: the mode before
	done      chan error // capacity 1; nil error means granted or done
	finished  bool
	abandoned bool  // the caller gave up: undo whatever it still gets
	undo      bool  // the call undoes an abandoned one
	undoOf    *call // for an undoing cancel: the abandoned conversion
}

func (c *call) finish(err error) {
	if c.finished {
		return
	}
	c.finished = true
	c.done <- err
}

// setID records a lock's id once an answer names it.
func (st *state) setID(ls *lockState, id uint64) {
	if ls.id == 0 && id != 0 {
		ls.id = id
		st.locks[id] = ls
	}
}

// forget removes a lock from the store's records.
func (st *state) forget(ls *lockState) {
	if !ls.gone {
		st.leave(ls)
	}
	ls.gone = true
	if ls.id != 0 && st.locks[ls.id] == ls {
		delete(st.locks, ls.id)
	}
	if st.byOwner[ls.ownerKey] == ls {
		delete(st.byOwner, ls.ownerKey)
	}
}

// lose removes a lock that went away without our release and tells its lease.
func (st *state) lose(ls *lockState) {
	if !ls.gone {
		close(ls.lost)
	}
	st.forget(ls)
}
