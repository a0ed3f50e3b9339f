package alarm

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// wait returns when ch is closed, and fails the test after a minute.
func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(time.Minute):
		t.Fatalf("%s did not happen within a minute", what)
	}
}

// pending returns how many alarms the clock holds.
func (c *Clock) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.alarms)
}

func TestAlarmsRunOnceAndNeverEarly(t *testing.T) {
	var c Clock
	start := time.Now()
	delays := []time.Duration{30 * time.Millisecond, 0, 10 * time.Millisecond, -time.Second, 20 * time.Millisecond, 10 * time.Millisecond}
	var runs [6]atomic.Int32
	var early atomic.Int32
	var wg sync.WaitGroup
	for i, d := range delays {
		wg.Add(1)
		when := start.Add(d)
		c.At(when, func() {
			defer wg.Done()
			if time.Now().Before(when) {
				early.Add(1)
			}
			runs[i].Add(1)
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	wait(t, done, "every alarm's run")
	for i := range runs {
		if n := runs[i].Load(); n != 1 {
			t.Errorf("alarm %d (after %s) ran %d times, want once", i, delays[i], n)
		}
	}
	if n := early.Load(); n != 0 {
		t.Errorf("%d alarms ran before their time", n)
	}
	if n := c.pending(); n != 0 {
		t.Errorf("%d alarms still held after all ran", n)
	}
}

func TestStoppedAlarmsDoNotRun(t *testing.T) {
	var c Clock
	ran := make(chan int, 100)
	// Set and stopped in turn, each later than the one before, as an
	// uncontended lock loop does: none runs, and the last, left set,
	// runs although the timer was armed for the first only.
	var last *Alarm
	for i := range 100 {
		a := c.After(time.Duration(i)*time.Millisecond, func() { ran <- i })
		if i == 99 {
			last = a
			break
		}
		if !a.Stop() {
			t.Fatalf("Stop of pending alarm %d = false", i)
		}
		if a.Stop() {
			t.Fatalf("second Stop of alarm %d = true", i)
		}
	}
	select {
	case i := <-ran:
		if i != 99 {
			t.Fatalf("stopped alarm %d ran", i)
		}
	case <-time.After(time.Minute):
		t.Fatal("the alarm left set did not run within a minute")
	}
	if last.Stop() {
		t.Error("Stop after the run = true")
	}
	if n := c.pending(); n != 0 {
		t.Errorf("%d alarms still held", n)
	}
}

func TestReset(t *testing.T) {
	var c Clock
	ran := make(chan struct{}, 2)
	a := c.After(time.Hour, func() { ran <- struct{}{} })
	// Earlier than the timer is armed for: the timer must come sooner.
	if !a.Reset(time.Now().Add(5 * time.Millisecond)) {
		t.Fatal("Reset of a pending alarm = false")
	}
	wait(t, chanOf(ran), "the reset alarm's run")
	// Reset after the run sets it again.
	if a.Reset(time.Now()) {
		t.Fatal("Reset of an alarm that ran = true")
	}
	wait(t, chanOf(ran), "the second run")
	// Reset of a stopped alarm sets it again too.
	b := c.After(time.Hour, func() { ran <- struct{}{} })
	b.Stop()
	if b.Reset(time.Now()) {
		t.Fatal("Reset of a stopped alarm = true")
	}
	wait(t, chanOf(ran), "the stopped alarm's run after Reset")
	// Put off: it does not run at its first time.
	d := c.After(time.Millisecond, func() { ran <- struct{}{} })
	d.Reset(time.Now().Add(time.Hour))
	ranE := make(chan struct{})
	c.After(2*time.Millisecond, func() { close(ranE) })
	wait(t, ranE, "a later alarm's run")
	select {
	case <-ran:
		t.Fatal("an alarm put off by an hour ran")
	default:
	}
	if !d.Stop() {
		t.Fatal("Stop of the alarm put off = false")
	}
}

// chanOf turns one receive from ch into a closed channel.
func chanOf(ch <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() { <-ch; close(done) }()
	return done
}

func TestConcurrentUse(t *testing.T) {
	var c Clock
	var ran, kept atomic.Int32
	var wg sync.WaitGroup
	var runs sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				d := time.Duration((g*7+i)%5) * time.Millisecond
				if i%3 == 0 {
					runs.Add(1)
					kept.Add(1)
					c.After(d, func() { ran.Add(1); runs.Done() })
					continue
				}
				a := c.After(time.Minute+d, func() { t.Error("a stopped alarm ran") })
				if i%3 == 1 {
					a.Reset(time.Now().Add(time.Hour))
				}
				if !a.Stop() {
					// It ran (the test then fails above) or was stopped twice.
					t.Error("Stop of a pending alarm = false")
				}
			}
		})
	}
	wg.Wait()
	done := make(chan struct{})
	go func() { runs.Wait(); close(done) }()
	wait(t, done, "the kept alarms' runs")
	if ran.Load() != kept.Load() {
		t.Errorf("%d alarms ran, want %d", ran.Load(), kept.Load())
	}
}

func TestWithTimeout(t *testing.T) {
	var c Clock
	ctx, cancel := c.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancel()
	dl, ok := ctx.Deadline()
	if !ok || time.Until(dl) > 5*time.Millisecond {
		t.Fatalf("Deadline = %v, %v; want within 5ms", dl, ok)
	}
	wait(t, ctx.Done(), "the timeout")
	if time.Now().Before(dl) {
		t.Error("ended before its deadline")
	}
	if err := ctx.Err(); err != context.DeadlineExceeded {
		t.Errorf("Err = %v, want context.DeadlineExceeded", err)
	}
	if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
		t.Errorf("Cause = %v, want one matching context.DeadlineExceeded", cause)
	}
}

func TestWithTimeoutCancelledFirst(t *testing.T) {
	var c Clock
	ctx, cancel := c.WithTimeout(context.Background(), time.Hour)
	cancel()
	wait(t, ctx.Done(), "the cancel")
	if err := ctx.Err(); err != context.Canceled {
		t.Errorf("Err = %v, want context.Canceled", err)
	}
	if n := c.pending(); n != 0 {
		t.Errorf("%d alarms left after cancel, want 0", n)
	}
}

func TestWithTimeoutFollowsParent(t *testing.T) {
	var c Clock
	parent, stop := context.WithCancelCause(context.Background())
	ctx, cancel := c.WithTimeout(parent, time.Hour)
	defer cancel()
	boom := errors.New("boom")
	stop(boom)
	wait(t, ctx.Done(), "the parent's end")
	if err := ctx.Err(); err != context.Canceled {
		t.Errorf("Err = %v, want context.Canceled", err)
	}
	if cause := context.Cause(ctx); cause != boom {
		t.Errorf("Cause = %v, want the parent's", cause)
	}
	cancel()

	// A parent whose deadline comes first keeps its deadline, and no
	// alarm is set.
	early, cancelEarly := context.WithTimeout(context.Background(), time.Minute)
	defer cancelEarly()
	ctx2, cancel2 := c.WithTimeout(early, time.Hour)
	defer cancel2()
	want, _ := early.Deadline()
	if got, ok := ctx2.Deadline(); !ok || !got.Equal(want) {
		t.Errorf("Deadline = %v, %v; want the parent's %v", got, ok, want)
	}
	if n := c.pending(); n != 0 {
		t.Errorf("%d alarms set under a parent that ends first, want 0", n)
	}

	// Derived contexts end with it.
	ctx3, cancel3 := c.WithTimeout(context.Background(), time.Millisecond)
	defer cancel3()
	child, cancelChild := context.WithCancel(ctx3)
	defer cancelChild()
	wait(t, child.Done(), "a derived context's end")
	if !errors.Is(context.Cause(child), context.DeadlineExceeded) {
		t.Errorf("derived Cause = %v, want one matching context.DeadlineExceeded", context.Cause(child))
	}
}
