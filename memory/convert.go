package memory

import (
	"context"
	"errors"
	"fmt"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// Convert changes the mode of the lock held by req.Owner, waiting until the
// new mode is granted or ctx ends (the conversion is then withdrawn and the
// lock stays in its old mode). The grant carries a fresh Blocking channel
// if the mode changed, else the lock's current one.
func (s *Store) Convert(ctx context.Context, req driver.Request, _ driver.Grant, mode driver.Mode) (driver.Grant, error) {
	s.mu.Lock()
	e, err := s.holder(req)
	if err != nil {
		s.mu.Unlock()
		return driver.Grant{}, err
	}
	var deadline int64
	if d, ok := ctx.Deadline(); ok {
		deadline = int64(d.Sub(s.epoch)) + 1
	}
	res, err := s.tab.Convert(s.now(), locktable.ConvertRequest{
		Session: e.session, Lock: e.lock, Mode: mode, Deadline: deadline,
	})
	if err != nil {
		err = tableErr(err)
		if e.group != nil && errors.Is(err, driver.ErrDeadlock) {
			err = fmt.Errorf("%w (group %s%s)", err, e.group.key, s.trace(e.group, locktable.LockInfo{
				ID: e.lock, Resource: e.res, State: locktable.LockConverting, Requested: mode,
			}))
		}
		s.mu.Unlock()
		return driver.Grant{}, err
	}
	wait := make(chan outcome, 1)
	e.wait = wait
	s.dispatch(res.Events)
	if res.Status == locktable.StatusGranted {
		e.wait = nil
		s.mu.Unlock()
		return driver.Grant{Token: res.Token, Blocking: e.blocking}, nil
	}
	s.signal(e.res)
	s.arm()
	s.mu.Unlock()
	o, err := s.await(ctx, wait, func() {
		res, cerr := s.tab.Cancel(s.now(), e.session, e.lock)
		if cerr == nil {
			e.wait = nil
			s.dispatch(res.Events)
		}
	})
	if err != nil {
		return driver.Grant{}, err
	}
	return driver.Grant{Token: o.token, Blocking: o.blocking}, nil
}
