//go:build !linux

package workload

import "time"

// work stands for a critical section that takes d (see hold_linux.go).
func work(d time.Duration) { time.Sleep(d) }
