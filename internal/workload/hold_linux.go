package workload

import (
	"syscall"
	"time"
)

// work stands for a critical section that takes d. It sleeps in the
// kernel (nanosleep) rather than with time.Sleep: the Go runtime waits for
// its timers in the network poller with a timeout in whole milliseconds,
// so once the process receives a message during a time.Sleep(1ms) (a
// queued waiter's answer, say), the rest of the sleep is rounded up to a
// millisecond and the sleep lasts up to 2 ms. The hold would then measure
// the client's network traffic, not the lock: a library whose waiters
// hear nothing while queued would look faster than one that answers them.
func work(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	for {
		var rem syscall.Timespec
		if err := syscall.Nanosleep(&ts, &rem); err != syscall.EINTR {
			return
		}
		ts = rem
	}
}
