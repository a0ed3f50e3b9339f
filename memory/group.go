package memory

import (
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// group is the table session shared by the acquisitions of one
// driver.Request.Group: one owner in the wait-for graph.
type group struct {
	key     string
	session locktable.SessionID
	head    *entry // the group's acquisitions, granted or pending
	entries int    // their number
}

// link adds e to g's acquisitions.
func (g *group) link(e *entry) {
	e.next = g.head
	if g.head != nil {
		g.head.prev = e
	}
	g.head = e
	g.entries++
}

// unlink removes e from g's acquisitions, if it is there.
func (g *group) unlink(e *entry) {
	if e.prev == nil && g.head != e {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		g.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.prev, e.next = nil, nil
	g.entries--
}

// sessionFor returns the table session for req: a new session of its own
// for an ungrouped request, else its group's, opened if the group has none
// yet. The caller links the request into a new group once the table took
// it, or closes the group's session if it stays idle.
func (s *Store) sessionFor(st locktable.Stamp, req driver.Request) (locktable.SessionID, *group, error) {
	if req.Group == "" {
		s.session++
		if err := s.tab.OpenSession(st, s.session, req.Owner); err != nil {
			return 0, nil, err
		}
		return s.session, nil, nil
	}
	if g := s.groups[req.Group]; g != nil {
		return g.session, g, nil
	}
	s.session++
	if err := s.tab.OpenSession(st, s.session, req.Group); err != nil {
		return 0, nil, err
	}
	g := &group{key: req.Group, session: s.session}
	s.groups[req.Group] = g
	return g.session, g, nil
}

// vacate returns the session of e, forgotten and gone from the table, if
// that left it empty, to be closed; else 0.
func (s *Store) vacate(e *entry) locktable.SessionID {
	if e.group == nil {
		return e.session
	}
	return s.idle(e.group)
}

// idle returns g's session, and forgets g, if g has no acquisition left;
// else 0.
func (s *Store) idle(g *group) locktable.SessionID {
	if g.entries > 0 {
		return 0
	}
	delete(s.groups, g.key)
	return g.session
}

// closeSession closes a session left with nothing; 0 is none.
func (s *Store) closeSession(sid locktable.SessionID) {
	if sid == 0 {
		return
	}
	res, _ := s.tab.CloseSession(s.now(), sid)
	s.dispatch(res.Events)
}

// unlock takes the lock or request of e, forgotten, out of the table,
// grants what follows, and closes its session if that leaves it empty.
func (s *Store) unlock(e *entry) {
	if e.group == nil {
		s.closeSession(e.session) // releases or cancels the one lock
		return
	}
	res, _ := s.tab.Release(s.now(), e.session, e.lock)
	s.dispatch(res.Events)
	s.closeSession(s.idle(e.group))
}
