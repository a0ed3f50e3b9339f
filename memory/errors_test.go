package memory_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/memory"
)

// TestTableErrorsInDriverTerms: the store's refusals match the driver error
// that the lock table's error means, and the table's error too; a limit is
// unavailability (room may come) but a name too long is an invalid
// argument (it never fits).
func TestTableErrorsInDriverTerms(t *testing.T) {
	ctx := t.Context()
	req := func(resource string, owner byte) driver.Request {
		return driver.Request{Resource: resource, Owner: strings.Repeat(string(owner), 32), Mode: driver.EX, TTL: time.Minute}
	}
	for _, c := range []struct {
		what   string
		limits locktable.Limits
		req    driver.Request // made after one of "a"
		driver error
		table  error
	}{
		{"contention", locktable.Limits{}, req("a", 'b'), driver.ErrTaken, locktable.ErrWouldBlock},
		{"a limit", locktable.Limits{MaxSessions: 1}, req("b", 'b'), driver.ErrUnavailable, locktable.ErrTooManySessions},
		{"a name too long", locktable.Limits{MaxNameLen: 40}, req(strings.Repeat("n", 41), 'b'), driver.ErrInvalid, locktable.ErrNameTooLong},
	} {
		s := memory.New(memory.WithLimits(c.limits))
		defer s.Close()
		if _, err := s.Acquire(ctx, req("a", 'a')); err != nil {
			t.Fatalf("%s: the first lock: %v", c.what, err)
		}
		_, err := s.Acquire(ctx, c.req)
		if !errors.Is(err, c.driver) || !errors.Is(err, c.table) || !strings.HasPrefix(err.Error(), c.driver.Error()+": ") {
			t.Errorf("%s: %v, want %v then %v", c.what, err, c.driver, c.table)
		}
		for _, other := range []error{driver.ErrTaken, driver.ErrUnavailable, driver.ErrInvalid, driver.ErrNotHeld} {
			if other != c.driver && errors.Is(err, other) {
				t.Errorf("%s: %v also matches %v", c.what, err, other)
			}
		}
	}
}
