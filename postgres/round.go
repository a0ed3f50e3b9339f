package postgres

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// batchTimeout bounds one round of a shared session. Its statements never
// wait for a lock, so a round that takes longer means the server or the
// network is stuck: the session ends, and its locks with it. The
// connection's deadline is moved only when less than batchTimeout is left,
// to twice that ahead, so that most rounds start no timer: a round gets
// between one and two batchTimeouts.
const batchTimeout = 30 * time.Second

// A round is a batch of calls written together and answered in order. Its
// statements that may share a transaction (session.joint) run one after
// the other in one implicit transaction, ended by one Sync: the server then
// pays one transaction and one flush of its answers for all of them instead
// of one each. Any other statement, and the Parse of a statement not
// prepared yet, has a Sync of its own.
type round struct {
	parts    []part
	next     int // the part being read
	first    int // the first part of the transaction being read
	deadline time.Time

	// The answer of the part being read.
	vals [][]byte
	err  error

	refused map[string]error // statements the server would not prepare

	cancelled bool // guarded by session.mu: the reading caller's context ended

	space [2]part // the parts of a round of one call
}

// A part is one statement of a round, or the Parse of one.
type part struct {
	c       *call
	name    string // of the prepared statement
	prepare bool
	sync    bool     // a Sync follows: the part ends its transaction
	vals    [][]byte // its row, read before its transaction ended
}

// plan returns the round of batch, preparing the statements not prepared
// yet on this session.
func (s *session) plan(batch []*call) *round {
	r := &round{}
	r.parts = r.space[:0]
	for _, c := range batch {
		name, ok := s.prepared[c.sql]
		if !ok {
			s.names++
			name = "dlm_" + strconv.Itoa(s.names)
			s.prepared[c.sql] = name
			r.parts = append(r.parts, part{c: c, name: name, prepare: true, sync: true})
		}
		r.parts = append(r.parts, part{c: c, name: name, sync: true})
	}
	// A statement shares its transaction with the next one when both may.
	for i := range len(r.parts) - 1 {
		p, q := &r.parts[i], &r.parts[i+1]
		if !p.prepare && !q.prepare && s.mayJoin(p.c) && s.mayJoin(q.c) {
			p.sync = false
		}
	}
	return r
}

// mayJoin reports whether c may share a transaction with other statements:
// a statement whose effects do not depend on its transaction committing
// (advisory locks, unlocks, the sequence, reading pg_locks), unless it was
// skipped once already.
func (s *session) mayJoin(c *call) bool { return !c.alone && s.joint[c.sql] }

// resultFormats asks for every column in the binary format.
var resultFormats = []int16{pgx.BinaryFormatCode}

// write sends r, within the connection's deadline (see batchTimeout).
func (s *session) write(r *round) error {
	if now := time.Now(); s.deadline.Sub(now) < batchTimeout {
		s.deadline = now.Add(2 * batchTimeout)
		if err := s.nc.SetDeadline(s.deadline); err != nil {
			return err
		}
	}
	r.deadline = s.deadline
	for _, p := range r.parts {
		if p.prepare {
			s.fe.SendParse(&pgproto3.Parse{Name: p.name, Query: p.c.sql})
		} else {
			s.fe.SendBind(&pgproto3.Bind{PreparedStatement: p.name, Parameters: p.c.params, ResultFormatCodes: resultFormats})
			s.fe.SendExecute(&pgproto3.Execute{})
		}
		if p.sync {
			s.fe.SendSync(&pgproto3.Sync{})
		}
	}
	return s.fe.Flush()
}

// read reads the answers to r from its next part on, finishing the calls of
// each transaction once it ended. An error it returns ends the session (see
// fail); a timeout leaves the round where it stopped, to be read on.
func (s *session) read(r *round) error {
	for r.next < len(r.parts) {
		msg, err := s.fe.Receive()
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			if r.vals == nil && r.err == nil {
				r.vals = r.parts[r.next].c.copyRow(m.Values)
			}
		case *pgproto3.CommandComplete:
			// A statement whose transaction goes on keeps its row until
			// the transaction ends.
			if p := &r.parts[r.next]; !p.sync && r.err == nil {
				p.vals, r.vals = r.vals, nil
				r.next++
			}
		case *pgproto3.ErrorResponse:
			pgErr := pgconn.ErrorResponseToPgError(m)
			if !isServerError(pgErr) {
				return pgErr // the server ends the session
			}
			if r.err == nil {
				r.err, r.vals = pgErr, nil
			}
		case *pgproto3.ReadyForQuery:
			s.answer(r)
		case *pgproto3.ParseComplete, *pgproto3.BindComplete,
			*pgproto3.NoticeResponse, *pgproto3.ParameterStatus, *pgproto3.NotificationResponse:
		default:
			return fmt.Errorf("postgres: the server answered %T in a round", msg)
		}
	}
	return nil
}

// answer ends the transaction of r being read, whose Sync the server has
// answered. When it committed, each of its calls gets its row. When it
// failed, the part being read gets the error, and the server skipped the
// parts after it: they are sent again, each in a transaction of its own.
// The parts before it ran, and what they did stands (nothing they do
// depends on their transaction), except the durability of a token whose
// sequence advance was logged: their answers wait for a transaction that
// commits with a flush of the log (retry).
func (s *session) answer(r *round) {
	first, failed := r.first, r.next
	last := failed
	for !r.parts[last].sync {
		last++
	}
	r.next, r.first = last+1, last+1
	vals, err := r.vals, r.err
	r.vals, r.err = nil, nil
	p := &r.parts[failed]
	if p.prepare {
		if err != nil {
			if r.refused == nil {
				r.refused = map[string]error{}
			}
			r.refused[p.c.sql] = err
			delete(s.prepared, p.c.sql) // prepare it again next time
		}
		return
	}
	if err == nil {
		for i := first; i < failed; i++ {
			s.finishPart(r, &r.parts[i], r.parts[i].vals, nil)
		}
		s.finishPart(r, p, vals, nil)
		return
	}
	s.finishPart(r, p, nil, err)
	if first < failed || failed < last {
		s.retry(r.parts[first:failed], r.parts[failed+1:last+1])
	}
}

// finishPart finishes the call of p with its answer.
func (s *session) finishPart(r *round, p *part, vals [][]byte, err error) {
	if perr := r.refused[p.c.sql]; perr != nil {
		vals, err = nil, perr
	}
	s.finish(p.c, vals, rowless(vals, err))
}

// rowless returns err, or for a statement that answered no row and no
// error, an error saying so.
func rowless(vals [][]byte, err error) error {
	if err == nil && vals == nil {
		return errors.New("postgres: the statement answered no row")
	}
	return err
}

// barrierSQL commits a transaction with an id, synchronously whatever the
// server's setting: its commit flushes the log written before it.
const barrierSQL = `SELECT set_config('synchronous_commit', 'on', true), pg_current_xact_id()`

// retry puts, at the head of the queue, the calls of a failed transaction
// that the server skipped, each to be sent alone, behind a barrier that
// answers the calls ran before the failure once the log is flushed. Should
// the barrier fail, the session ends, and those calls with it.
func (s *session) retry(ran, skipped []part) {
	var head []*call
	if len(ran) > 0 {
		ran = slices.Clone(ran)
		head = append(head, &call{sql: barrierSQL, done: make(chan struct{}), after: func(c *call, _ bool) {
			err := c.err
			if err != nil {
				s.abort()
				err = errSessionEnded
			}
			for i := range ran {
				if err != nil {
					s.finish(ran[i].c, nil, err)
				} else {
					s.finish(ran[i].c, ran[i].vals, rowless(ran[i].vals, nil))
				}
			}
		}})
	}
	for _, p := range skipped {
		if !p.prepare {
			p.c.alone = true
			head = append(head, p.c)
		}
	}
	s.mu.Lock()
	s.queue = append(head, s.queue...)
	s.mu.Unlock()
}

// fail ends the session after r failed with err: the connection can no
// longer be trusted, and the calls of r not answered yet fail with err.
func (s *session) fail(r *round, err error) {
	// The session is over before any caller hears of it, so that each can
	// tell a failed session from a refused statement.
	s.mu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.mu.Unlock()
	for i := r.first; i < len(r.parts); i++ {
		if p := &r.parts[i]; !p.prepare {
			s.finish(p.c, nil, err)
		}
	}
	r.next = len(r.parts)
}

// copyRow returns a copy of a row's values, which the frontend reuses, in
// c's room when it fits.
func (c *call) copyRow(row [][]byte) [][]byte {
	buf := c.rowBytes[:0]
	vals := c.rowSpace[:0]
	for _, v := range row {
		if v == nil {
			vals = append(vals, nil)
			continue
		}
		start := len(buf)
		buf = append(buf, v...)
		vals = append(vals, buf[start:len(buf):len(buf)])
	}
	return vals
}

// isTimeout reports whether err is a read deadline passing.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// isServerError reports whether err is an error the server answered, after
// which the session lives on.
func isServerError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity != "FATAL" && pgErr.Severity != "PANIC"
}
