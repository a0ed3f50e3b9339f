package postgres

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// batchTimeout bounds one round of a shared session's pipeline. Its
// statements never wait for a lock, so a round that takes longer means the
// server or the network is stuck: the session ends, and its locks with it.
const batchTimeout = 30 * time.Second

// maxBatch bounds the statements a shared session sends in one round.
const maxBatch = 128

// errSessionEnded is the error of a statement on a shared session that
// ended before it ran.
var errSessionEnded = errors.New("the shared session ended")

// A session is a connection whose server session holds the locks of many
// leases at once: PostgreSQL keeps an advisory lock per session, and one
// session may hold any number of them. Its goroutine sends the statements
// queued by callers in rounds, pipelined (all of a round in one write, each
// statement its own implicit transaction), and reads their answers in
// order, so that concurrent acquisitions and releases share round trips and
// server processes instead of each taking a connection.
//
// Outcomes do not depend on the caller: a caller whose context ends stops
// waiting, but its statement, once queued, runs, and what must follow it
// (unlocking a grant nobody will hold, freeing the key for others) runs in
// the session's goroutine (call.after).
type session struct {
	conn *pgx.Conn // owned by run once started
	pid  int32     // of the backend, as reported at start-up

	mu     sync.Mutex
	queue  []*call
	err    error // why the session ended; nil while it lives
	wake   chan struct{}
	closed chan struct{} // closed by abort

	done     chan struct{}     // closed when run returns
	prepared map[string]string // owned by run: SQL -> statement name
	names    int               // owned by run: statements named so far
}

// A call is one statement on a session, answering one row.
type call struct {
	sql    string
	params [][]byte

	vals [][]byte // the row, copied; set with err before done closes
	err  error

	// state is callWaiting until either the session finishes the call
	// (callFinished) or the caller stops waiting (callAbandoned).
	state atomic.Int32
	done  chan struct{}
	// after, if set, runs in the session's goroutine once the answer is
	// in, before done closes; abandoned tells whether the caller left.
	after func(c *call, abandoned bool)
}

const (
	callWaiting int32 = iota
	callFinished
	callAbandoned
)

// openSession starts a session on conn, which the caller gives up.
func openSession(conn *pgx.Conn) *session {
	s := &session{
		conn:     conn,
		pid:      int32(conn.PgConn().PID()),
		wake:     make(chan struct{}, 1),
		closed:   make(chan struct{}),
		done:     make(chan struct{}),
		prepared: map[string]string{},
	}
	go s.run()
	return s
}

// ended reports whether the session has ended, and why.
func (s *session) ended() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// enqueue queues c, or finishes it at once with the session's end.
func (s *session) enqueue(c *call) {
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		s.finish(c, nil, err)
		return
	}
	s.queue = append(s.queue, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// query runs sql with args on the session and scans its one row into dest.
// When ctx ends first it returns ctx's error at once, and the statement
// still runs.
func (s *session) query(ctx context.Context, sql string, args []any, dest ...any) error {
	return s.queryThen(ctx, sql, args, nil, dest...)
}

// queryThen is query, with after to run in the session's goroutine once
// the statement is answered, whether or not the caller still waits.
func (s *session) queryThen(ctx context.Context, sql string, args []any, after func(*call, bool), dest ...any) error {
	c, err := s.send(sql, args, after)
	if err != nil {
		return err
	}
	if err := c.wait(ctx); err != nil {
		return err
	}
	if c.err != nil {
		return c.err
	}
	return scanRow(c.vals, dest...)
}

// send queues a call of sql with args, with after to run once it is
// answered.
func (s *session) send(sql string, args []any, after func(*call, bool)) (*call, error) {
	params, err := encodeParams(args)
	if err != nil {
		return nil, err
	}
	c := &call{sql: sql, params: params, done: make(chan struct{}), after: after}
	s.enqueue(c)
	return c, nil
}

// wait waits for the answer to c, or for ctx to end, in which case the call
// is abandoned (it still runs) and ctx's error returned.
func (c *call) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
	}
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
	close(c.done)
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

// run sends the queued calls in rounds until the session ends.
func (s *session) run() {
	defer close(s.done)
	var err error
	for err == nil {
		select {
		case <-s.closed:
			err = errSessionEnded
			continue
		case <-s.wake:
		}
		for err == nil {
			select {
			case <-s.closed:
				err = errSessionEnded
				continue
			default:
			}
			s.mu.Lock()
			batch := s.queue
			if len(batch) > maxBatch {
				batch = batch[:maxBatch:maxBatch]
			}
			s.queue = s.queue[len(batch):]
			if len(s.queue) == 0 {
				s.queue = nil
			}
			s.mu.Unlock()
			if len(batch) == 0 {
				break
			}
			err = s.round(batch)
		}
	}
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	err = s.err
	pending := s.queue
	s.queue = nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	_ = s.conn.Close(ctx)
	cancel()
	for _, c := range pending {
		s.finish(c, nil, err)
	}
}

// round sends batch pipelined and finishes each call with its answer. An
// error it returns ends the session: the connection failed, and the calls
// it could not answer have failed with it.
func (s *session) round(batch []*call) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
	defer cancel()
	p := s.conn.PgConn().StartPipeline(ctx)
	prepares := make([]bool, len(batch)) // the call's statement is prepared before it
	for i, c := range batch {
		name, ok := s.prepared[c.sql]
		if !ok {
			s.names++
			name = "dlm_" + strconv.Itoa(s.names)
			s.prepared[c.sql] = name
			prepares[i] = true
			p.SendPrepare(name, c.sql, nil)
			p.SendPipelineSync()
		}
		p.SendQueryPrepared(name, c.params, nil, []int16{pgx.BinaryFormatCode})
		p.SendPipelineSync()
	}
	answered := 0
	defer func() {
		if err != nil {
			// The session is over before any caller hears of it, so
			// that each can tell a failed session from a refused
			// statement.
			s.mu.Lock()
			if s.err == nil {
				s.err = err
			}
			s.mu.Unlock()
			for _, c := range batch[answered:] {
				s.finish(c, nil, err)
			}
		}
	}()
	if err := p.Flush(); err != nil {
		return err
	}
	// The server's refusals to prepare a statement, which its calls get
	// instead of their own answers.
	refused := map[string]error{}
	for i, c := range batch {
		if prepares[i] {
			_, perr := p.GetResults() // the statement's description
			if err := endOfStatement(p); err != nil {
				return err
			}
			if perr != nil && !isServerError(perr) {
				return perr
			}
			if perr != nil {
				refused[c.sql] = perr
				delete(s.prepared, c.sql) // prepare it again next time
			}
		}
		vals, qerr := readRow(p)
		if err := endOfStatement(p); err != nil {
			return err
		}
		if qerr != nil && !isServerError(qerr) {
			return qerr
		}
		if perr := refused[c.sql]; perr != nil {
			vals, qerr = nil, perr
		}
		answered++
		s.finish(c, vals, qerr)
	}
	return p.Close()
}

// readRow reads the answer to one prepared query of p: its first row,
// copied.
func readRow(p *pgconn.Pipeline) ([][]byte, error) {
	res, err := p.GetResults()
	if err != nil {
		return nil, err
	}
	rr, ok := res.(*pgconn.ResultReader)
	if !ok {
		return nil, fmt.Errorf("postgres: pipeline answered %T, not rows", res)
	}
	var vals [][]byte
	for rr.NextRow() {
		if vals != nil {
			continue
		}
		row := rr.Values()
		vals = make([][]byte, len(row))
		for i, v := range row {
			if v != nil {
				vals[i] = append(make([]byte, 0, len(v)), v...)
			}
		}
	}
	if _, err := rr.Close(); err != nil {
		return nil, err
	}
	if vals == nil {
		return nil, errors.New("postgres: the statement answered no row")
	}
	return vals, nil
}

// endOfStatement reads the end of one implicit transaction of p.
func endOfStatement(p *pgconn.Pipeline) error {
	res, err := p.GetResults()
	if err != nil {
		return err
	}
	if _, ok := res.(*pgconn.PipelineSync); !ok {
		return fmt.Errorf("postgres: pipeline answered %T, not the end of a statement", res)
	}
	return nil
}

// isServerError reports whether err is an error the server answered, after
// which the session lives on.
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity != "FATAL" && pgErr.Severity != "PANIC"
}
