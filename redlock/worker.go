package redlock

import "time"

// workerIdle is how long a node's idle worker waits for another call
// before it ends.
const workerIdle = time.Second

// run runs f on one of n's idle workers, or on a new one when none is
// idle. A worker is a goroutine that serves one call after another and
// ends after workerIdle without one: calls then reuse a stack already
// grown to the depth of a Redis call instead of growing a new
// goroutine's, which cost a tenth of the client's CPU.
func (n *node) run(f func()) {
	select {
	case n.tasks <- f:
	default:
		go n.work(f)
	}
}

// work runs f, then the calls handed to it, until it has been idle for
// workerIdle.
func (n *node) work(f func()) {
	f()
	idle := time.NewTimer(workerIdle)
	defer idle.Stop()
	for {
		select {
		case f := <-n.tasks:
			f()
			idle.Reset(workerIdle)
		case <-idle.C:
			return
		}
	}
}
