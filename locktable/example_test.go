package locktable_test

import (
	"errors"
	"fmt"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// The server applies one command at a time, stamping each with its Raft
// index and the leader's clock, and pushes the returned events to clients.
func Example() {
	t := locktable.New(locktable.Limits{})
	var index uint64
	stamp := func() locktable.Stamp {
		index++
		return locktable.Stamp{Index: index, Now: int64(index) * 1e9}
	}
	show := func(r locktable.Result, err error) locktable.Result {
		if err != nil {
			fmt.Println("error:", err)
		}
		for _, e := range r.Events {
			fmt.Println(" ", e)
		}
		return r
	}

	t.OpenSession(stamp(), 1, "worker-a")
	t.OpenSession(stamp(), 2, "worker-b")

	fmt.Println("a takes orders/42 in EX:")
	a := show(t.Lock(stamp(), locktable.LockRequest{Session: 1, Resource: "orders/42", Mode: driver.EX}))

	fmt.Println("b asks for PR and waits; a is asked to yield:")
	show(t.Lock(stamp(), locktable.LockRequest{Session: 2, Resource: "orders/42", Mode: driver.PR, Deadline: 60e9}))

	fmt.Println("b's try-lock on the same resource fails at once:")
	_, err := t.Lock(stamp(), locktable.LockRequest{Session: 2, Owner: 1, Resource: "orders/42", Mode: driver.PR, Flags: locktable.NoQueue})
	fmt.Println(" ", errors.Is(err, locktable.ErrWouldBlock))

	fmt.Println("a down-converts to PR; b is granted:")
	show(t.Convert(stamp(), locktable.ConvertRequest{Session: 1, Lock: a.Lock, Mode: driver.PR}))

	fmt.Println("a's session expires:")
	show(t.ExpireSessions(stamp(), []locktable.SessionID{1}), nil)

	// Output:
	// a takes orders/42 in EX:
	//   Granted lock=1 session=1 owner=0 resource="orders/42" mode=EX token=3
	// b asks for PR and waits; a is asked to yield:
	//   Blocking lock=1 session=1 owner=0 resource="orders/42" mode=PR token=3
	// b's try-lock on the same resource fails at once:
	//   true
	// a down-converts to PR; b is granted:
	//   Granted lock=1 session=1 owner=0 resource="orders/42" mode=PR token=3 conversion
	//   Granted lock=2 session=2 owner=0 resource="orders/42" mode=PR token=6
	// a's session expires:
	//   Released lock=1 session=1 owner=0 resource="orders/42" mode=PR token=3 reason=SessionExpired
	//   SessionExpired session=1
}
