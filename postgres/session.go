package postgres

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// maxBatch bounds the statements a shared session sends in one round. A
// round's answers (a few dozen bytes each) fit the socket's buffers while
// the round is still being written.
const maxBatch = 128

// errSessionEnded is the error of a statement on a shared session that
// ended before it ran.
var errSessionEnded = errors.New("the shared session ended")

// A session is a connection whose server session holds the locks of many
// leases at once: PostgreSQL keeps an advisory lock per session, and one
// session may hold any number of them. It speaks the extended query
// protocol itself, on the connection taken over from pgx, so that a round
// can be read by one goroutine and finished by another.
//
// One goroutine at a time owns the connection and runs a round on it: the
// statements queued so far, written at once, and their answers read in
// order; statements that may share a transaction run in one (see round). A
// caller that finds the session idle runs its own statement as a round of
// one, on its own goroutine, as a plain pgx query would. Statements that arrive while the
// connection is owned queue, and the session's goroutine (run) sends them in
// rounds once the owner hands the connection over. So an uncontended caller
// pays no hand-off between goroutines, and concurrent callers share round
// trips and server processes instead of each taking a connection.
//
// Outcomes do not depend on the caller: a caller whose context ends stops
// waiting, but its statement, once queued, runs. A caller whose context
// ends while it reads its own round's answer stops reading (its context
// sets a read deadline) and hands the rest of the round to run, which reads
// on from where it stopped. What must follow an answer (unlocking a grant
// nobody will hold, freeing the key for others) runs in whichever goroutine
// reads it (call.after).
type session struct {
	nc    net.Conn // the connection to the server
	fe    *pgproto3.Frontend
	pid   int32           // of the backend, as reported at start-up
	joint map[string]bool // statements that may share a transaction

	mu     sync.Mutex
	queue  []*call
	owned  bool   // a goroutine owns the connection (see above)
	handed *round // a round whose caller left mid-read; run reads the rest
	// reading is the round its caller reads, which the caller's context
	// may interrupt.
	reading *round
	err     error // why the session ended; nil while it lives
	wake    chan struct{}
	closed  chan struct{} // closed by abort

	done chan struct{} // closed when run returns

	// Owned with the connection:
	prepared map[string]string // SQL -> statement name
	names    int               // statements named so far
	deadline time.Time         // the connection's; zero to set it anew
}

// A call is one statement on a session, answering one row.
type call struct {
	sql    string
	params [][]byte
	alone  bool // runs in a transaction of its own (set by the owner)

	vals [][]byte // the row, copied; set with err before done closes
	err  error

	// Room for the parameters and the row of a small call, which then
	// allocates nothing else.
	paramSpace [3][]byte
	paramBytes [40]byte
	rowSpace   [4][]byte
	rowBytes   [32]byte

	// state is callWaiting until either the session finishes the call
	// (callFinished) or the caller stops waiting (callAbandoned).
	state atomic.Int32
	done  chan struct{} // made when the call queues (admit); nil otherwise
	// after, if set, runs in the goroutine that read the answer, before
	// done closes; abandoned tells whether the caller left.
	after func(c *call, abandoned bool)
}

const (
	callWaiting int32 = iota
	callFinished
	callAbandoned
)

// openSession starts a session on conn, which the caller gives up. The
// statements in joint, whose effects do not depend on their transaction
// committing, may share one.
func openSession(ctx context.Context, conn *pgx.Conn, joint map[string]bool) (*session, error) {
	pc := conn.PgConn()
	if err := pc.SyncConn(ctx); err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	hc, err := pc.Hijack()
	if err != nil {
		_ = conn.Close(ctx)
		return nil, err
	}
	if hc.TxStatus != 'I' || hc.Frontend.ReadBufferLen() != 0 {
		_ = hc.Conn.Close()
		return nil, fmt.Errorf("postgres: the connection for a shared session is not idle (transaction status %q)", hc.TxStatus)
	}
	s := &session{
		nc:       hc.Conn,
		fe:       pgproto3.NewFrontend(hc.Conn, hc.Conn),
		pid:      int32(hc.PID),
		joint:    joint,
		wake:     make(chan struct{}, 1),
		closed:   make(chan struct{}),
		done:     make(chan struct{}),
		prepared: map[string]string{},
	}
	go s.run()
	return s, nil
}

// ended reports whether the session has ended, and why.
func (s *session) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// newCall returns a call of sql with args, with after to run once it is
// answered.
func newCall(sql string, args []any, after func(*call, bool)) (*call, error) {
	c := &call{sql: sql, after: after}
	params, err := encodeParams(c.paramSpace[:0], c.paramBytes[:0], args)
	if err != nil {
		return nil, err
	}
	c.params = params
	return c, nil
}

// send queues a call of sql with args, with after to run once it is
// answered, and does not wait for it. The statements that settle another
// one's outcome are sent so, from within its after.
func (s *session) send(sql string, args []any, after func(*call, bool)) error {
	c, err := newCall(sql, args, after)
	if err != nil {
		return err
	}
	s.admit(c, false)
	return nil
}

// What admit did with a call.
const (
	admitFinished = iota // the session had ended: so has the call
	admitQueued          // the call waits for a round of run's
	admitOwned           // the caller owns the idle connection: it runs the call
)

// admit queues c, or finishes it at once when the session has ended. With
// own, a caller that finds the connection idle takes it instead, to run c
// itself; without, the connection goes to run.
func (s *session) admit(c *call, own bool) int {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		s.finish(c, nil, err)
		return admitFinished
	}
	if !s.owned && own {
		s.owned = true
		s.mu.Unlock()
		return admitOwned
	}
	if c.done == nil {
		c.done = make(chan struct{})
	}
	s.queue = append(s.queue, c)
	wake := !s.owned
	s.owned = true
	s.mu.Unlock()
	if wake {
		s.wake <- struct{}{} // run owns the connection now
	}
	return admitQueued
}

// query runs sql with args on the session and scans its one row into dest.
// When ctx ends first it returns ctx's error at once, and the statement
// still runs.
func (s *session) query(ctx context.Context, sql string, args []any, dest ...any) error {
	return s.queryThen(ctx, sql, args, nil, dest...)
}

// queryThen is query, with after to run once the statement is answered,
// whether or not the caller still waits.
func (s *session) queryThen(ctx context.Context, sql string, args []any, after func(*call, bool), dest ...any) error {
	c, err := newCall(sql, args, after)
	if err != nil {
		return err
	}
	if err := s.do(ctx, c); err != nil {
		return err
	}
	if c.err != nil {
		return c.err
	}
	return scanRow(c.vals, dest...)
}

// do runs c and waits for its answer, or for ctx to end, in which case the
// call is abandoned (it still runs) and ctx's error returned. On an idle
// session the caller runs c itself; otherwise c waits in the queue.
func (s *session) do(ctx context.Context, c *call) error {
	switch s.admit(c, true) {
	case admitOwned:
		return s.direct(ctx, c)
	case admitQueued:
		return s.wait(ctx, c)
	}
	return nil
}

// direct runs c as a round of its own on the caller's goroutine, which owns
// the connection. When ctx ends before the answer is in, the caller hands
// the round to run and returns ctx's error.
func (s *session) direct(ctx context.Context, c *call) error {
	r := s.plan([]*call{c})
	err := s.write(r)
	if err == nil {
		s.mu.Lock()
		s.reading = r
		s.mu.Unlock()
		stop := context.AfterFunc(ctx, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if s.reading == r {
				r.cancelled = true
				_ = s.nc.SetReadDeadline(time.Unix(1, 0)) // wakes the reader
			}
		})
		err = s.read(r)
		stop()
		s.mu.Lock()
		s.reading = nil
		if r.cancelled {
			s.deadline = time.Time{} // the read deadline has passed
		}
		if err != nil && r.cancelled && isTimeout(err) {
			// The caller leaves; run reads the rest of the round.
			c.state.CompareAndSwap(callWaiting, callAbandoned)
			s.handed = r
			s.mu.Unlock()
			s.wake <- struct{}{}
			return fmt.Errorf("postgres: %w (the statement still runs on the shared session)", ctx.Err())
		}
		s.mu.Unlock()
	}
	if err != nil {
		s.fail(r, err)
	}
	s.release()
	return nil
}

// release gives the connection up after a round run by a caller: to run,
// when statements queued meanwhile or the session ended, or to the next
// caller.
func (s *session) release() {
	s.mu.Lock()
	handOver := len(s.queue) > 0 || s.err != nil
	s.owned = handOver
	s.mu.Unlock()
	if handOver {
		s.wake <- struct{}{}
	}
}

// wait waits for the answer to c, or for ctx to end, in which case ctx's
// error is returned: a call still queued is taken out and finished with
// that error (never sent, so its after settles nothing but its place), and
// one already sent is abandoned (it runs, and its after settles it).
// Taking it out matters: a grant statement that ran after its caller had
// left, and after others had taken and released the lock since, would hold
// the lock for a moment that nobody asked for.
func (s *session) wait(ctx context.Context, c *call) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
	s.mu.Lock()
	if i := slices.Index(s.queue, c); i >= 0 {
		s.queue = slices.Delete(s.queue, i, i+1)
		s.mu.Unlock()
		err := fmt.Errorf("postgres: %w (not sent)", ctx.Err())
		s.finish(c, nil, err)
		return err
	}
	s.mu.Unlock()
	if c.state.CompareAndSwap(callWaiting, callAbandoned) {
		return fmt.Errorf("postgres: %w (the statement still runs on the shared session)", ctx.Err())
	}
	<-c.done // finishing now
	return nil
}

// finish records the answer to c and runs its after.
func (s *session) finish(c *call, vals [][]byte, err error) {
	c.vals, c.err = vals, err
	abandoned := !c.state.CompareAndSwap(callWaiting, callFinished)
	if c.after != nil {
		c.after(c, abandoned)
	}
	if c.done != nil {
		close(c.done)
	}
}

// abort ends the session after the round it is in, without waiting: the
// calls not yet sent fail, and the connection closes, which frees every
// lock its server session holds.
func (s *session) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = errSessionEnded
	}
	select {
	case <-s.closed:
	default:
		close(s.closed)
	}
}

// stopped reports whether the session's goroutine has returned.
func (s *session) stopped() bool {
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// close aborts the session and waits for its goroutine to stop.
func (s *session) close() {
	s.abort()
	<-s.done
}

// run sends the queued calls in rounds whenever the connection is handed to
// it, until the session ends; then it closes the connection.
func (s *session) run() {
	defer close(s.done)
	closed := s.closed
	for {
		select {
		case <-s.wake:
		case <-closed:
			closed = nil
			s.mu.Lock()
			if s.owned {
				// Its owner hands it over after its round, seeing the
				// session ended.
				s.mu.Unlock()
				continue
			}
			s.owned = true
			s.mu.Unlock()
		}
		if !s.serve() {
			break
		}
	}
	s.mu.Lock()
	err := s.err
	pending := s.queue
	s.queue = nil
	s.mu.Unlock()
	_ = s.nc.SetDeadline(time.Now().Add(cleanupTimeout))
	s.fe.Send(&pgproto3.Terminate{})
	_ = s.fe.Flush()
	_ = s.nc.Close()
	for _, c := range pending {
		s.finish(c, nil, err)
	}
}

// serve runs rounds while run owns the connection: the rest of a round a
// caller left, then the queued calls. It returns true when it gave the
// connection up, the queue being empty, and false when the session ended.
func (s *session) serve() bool {
	for {
		s.mu.Lock()
		if r := s.handed; r != nil {
			s.handed = nil
			s.mu.Unlock()
			err := s.nc.SetReadDeadline(r.deadline)
			if err == nil {
				err = s.read(r)
			}
			if err != nil {
				s.fail(r, err)
			}
			continue
		}
		if s.err != nil {
			s.mu.Unlock()
			return false
		}
		batch := s.queue
		if len(batch) > maxBatch {
			batch = batch[:maxBatch:maxBatch]
		}
		s.queue = s.queue[len(batch):]
		if len(s.queue) == 0 {
			s.queue = nil
		}
		if len(batch) == 0 {
			s.owned = false
			s.mu.Unlock()
			return true
		}
		s.mu.Unlock()
		r := s.plan(batch)
		err := s.write(r)
		if err == nil {
			err = s.read(r)
		}
		if err != nil {
			s.fail(r, err)
		}
	}
}
