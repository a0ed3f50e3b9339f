package postgres

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// batchTimeout bounds one round of a shared session. Its statements never
// wait for a lock, so a round that takes longer means the server or the
// network is stuck: the session ends, and its locks with it.
const batchTimeout = 30 * time.Second

// A round is a batch of calls written together and answered in order, one
// answer per Sync: a call's Parse, when its statement is not prepared yet,
// then its Bind and Execute.
type round struct {
	parts    []part
	next     int // the part being read
	deadline time.Time

	// The answer of the part being read.
	vals [][]byte
	err  error

	refused map[string]error // statements the server would not prepare

	cancelled bool // guarded by session.mu: the reading caller's context ended
}

// A part is one Sync's worth of a round.
type part struct {
	c       *call
	name    string // of the prepared statement
	prepare bool
}

// plan returns the round of batch, preparing the statements not prepared
// yet on this session.
func (s *session) plan(batch []*call) *round {
	r := &round{parts: make([]part, 0, len(batch))}
	for _, c := range batch {
		name, ok := s.prepared[c.sql]
		if !ok {
			s.names++
			name = "dlm_" + strconv.Itoa(s.names)
			s.prepared[c.sql] = name
			r.parts = append(r.parts, part{c: c, name: name, prepare: true})
		}
		r.parts = append(r.parts, part{c: c, name: name})
	}
	return r
}

// resultFormats asks for every column in the binary format.
var resultFormats = []int16{pgx.BinaryFormatCode}

// write sends r, starting its deadline.
func (s *session) write(r *round) error {
	r.deadline = time.Now().Add(batchTimeout)
	if err := s.nc.SetDeadline(r.deadline); err != nil {
		return err
	}
	for _, p := range r.parts {
		if p.prepare {
			s.fe.SendParse(&pgproto3.Parse{Name: p.name, Query: p.c.sql})
		} else {
			s.fe.SendBind(&pgproto3.Bind{PreparedStatement: p.name, Parameters: p.c.params, ResultFormatCodes: resultFormats})
			s.fe.SendExecute(&pgproto3.Execute{})
		}
		s.fe.SendSync(&pgproto3.Sync{})
	}
	return s.fe.Flush()
}

// read reads the answers to r from its next part on, finishing each call
// with its answer. An error it returns ends the session (see fail); a
// timeout leaves the round where it stopped, to be read on.
func (s *session) read(r *round) error {
	for r.next < len(r.parts) {
		msg, err := s.fe.Receive()
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			if r.vals == nil && r.err == nil {
				r.vals = copyRow(m.Values)
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
		case *pgproto3.ParseComplete, *pgproto3.BindComplete, *pgproto3.CommandComplete,
			*pgproto3.NoticeResponse, *pgproto3.ParameterStatus, *pgproto3.NotificationResponse:
		default:
			return fmt.Errorf("postgres: the server answered %T in a round", msg)
		}
	}
	return nil
}

// answer ends the part of r being read with the answer read for it.
func (s *session) answer(r *round) {
	p := r.parts[r.next]
	r.next++
	vals, err := r.vals, r.err
	r.vals, r.err = nil, nil
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
	switch perr := r.refused[p.c.sql]; {
	case perr != nil:
		vals, err = nil, perr
	case err == nil && vals == nil:
		err = errors.New("postgres: the statement answered no row")
	}
	s.finish(p.c, vals, err)
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
	for _, p := range r.parts[r.next:] {
		if !p.prepare {
			s.finish(p.c, nil, err)
		}
	}
	r.next = len(r.parts)
}

// copyRow returns a copy of a row's values, which the frontend reuses, in
// one buffer.
func copyRow(row [][]byte) [][]byte {
	n := 0
	for _, v := range row {
		n += len(v)
	}
	buf := make([]byte, 0, n)
	vals := make([][]byte, len(row))
	for i, v := range row {
		if v != nil {
			start := len(buf)
			buf = append(buf, v...)
			vals[i] = buf[start:len(buf):len(buf)]
		}
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
