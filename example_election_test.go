package dlm_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/memory"
)

// A leader election: the leader's term is its fencing token, and its work
// stops the moment it can no longer be sure that it leads. Any store works
// the same way (here the in-process memory store).
func ExampleElection() {
	st := memory.New()
	defer st.Close()
	e := dlm.New(st).Election("election/scheduler", dlm.WithTTL(10*time.Second))
	ctx := context.Background()

	lead, err := e.Campaign(ctx, "10.0.0.7:8080") // blocks until elected
	if err != nil {
		log.Fatal(err)
	}
	ld, _ := e.Leader(ctx)
	fmt.Println("leader:", ld.Value, "term is the token:", ld.Term == lead.Term())
	select {
	case <-lead.Lost():
		log.Print("deposed: ", lead.Err()) // stop writing now
	default:
		// ... lead, writing with lead.Term() as the fencing token ...
	}
	_ = lead.Resign(ctx) // the next candidate is elected at once

	_, err = e.Leader(ctx)
	fmt.Println(errors.Is(err, dlm.ErrNoLeader))
	// Output:
	// leader: 10.0.0.7:8080 term is the token: true
	// true
}

// RunElection is the loop of a service that does some work only while it
// leads: OnStartedLeading's context is cancelled the moment leadership is
// lost, and the candidate campaigns again.
func ExampleRunElection() {
	st := memory.New()
	defer st.Close()
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	err := dlm.RunElection(ctx, dlm.ElectionConfig{
		Election: dlm.New(st).Election("election/compactor"),
		Value:    "host-a",
		OnStartedLeading: func(ctx context.Context, l *dlm.Leadership) {
			fmt.Println("leading as", l.Value())
			// ... compact until ctx is done; here, one round ...
		},
		OnStoppedLeading: func() { fmt.Println("stopped leading") },
	})
	fmt.Println("done:", err)
	// Output:
	// leading as host-a
	// stopped leading
	// done: <nil>
}

// A holder rebuilding a cache yields as soon as another instance waits for
// the lock, instead of making it wait for the whole rebuild.
func ExampleLease_Blocking() {
	st := memory.New()
	defer st.Close()
	locks := dlm.New(st)
	ctx := context.Background()

	l, err := locks.Acquire(ctx, "cache/products", dlm.WithAutoRenew(true))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan struct{})
	go func() { // another instance needs the lock meanwhile
		defer close(done)
		other, err := locks.Acquire(ctx, "cache/products")
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("the other instance holds the lock")
		_ = other.Release(ctx)
	}()
	for {
		select {
		case <-l.Blocking():
			fmt.Println("someone waits: saving progress and yielding")
			_ = l.Release(ctx)
			<-done
			return
		case <-time.After(10 * time.Millisecond):
			// ... rebuild one batch ...
		}
	}
	// Output:
	// someone waits: saving progress and yielding
	// the other instance holds the lock
}

// Acquisitions made through one Owner are one unit of work to the store's
// deadlock detection: when two units lock two resources in opposite
// orders, the request that would close the cycle fails at once instead of
// both waiting out their wait.
func ExampleClient_Owner() {
	st := memory.New()
	defer st.Close()
	locks := dlm.New(st)
	ctx := context.Background()

	a, b := locks.Owner(), locks.Owner()
	ax, _ := a.Acquire(ctx, "account/1")
	by, _ := b.Acquire(ctx, "account/2")
	queued := make(chan struct{})
	go func() {
		ay, err := a.Acquire(ctx, "account/2") // waits for b
		if err == nil {
			_ = ay.Release(ctx)
		}
		close(queued)
	}()
	for { // until a waits in the store
		info, _ := st.Inspect(ctx, "account/2")
		if len(info.Waiters) == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_, err := b.Acquire(ctx, "account/1", dlm.WithWait(time.Minute))
	fmt.Println(errors.Is(err, dlm.ErrDeadlock))
	_ = by.Release(ctx) // b backs off; a goes on
	<-queued
	_ = ax.Release(ctx)
	// Output:
	// true
}
