package testenv

import (
	"fmt"
	"path/filepath"
	"syscall"
	"time"
)

// Freeze stops process pid with SIGSTOP and returns once every one of its
// threads is stopped. kill returns when the signal is queued; a thread that
// waits for a core on a busy machine stops only once it runs, and a server
// can answer a request meanwhile. Thaw lets it go on.
func Freeze(pid int) error {
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		stopped, err := allStopped(pid)
		if err != nil || stopped {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: process %d not stopped 10 s after SIGSTOP", pid)
		}
		time.Sleep(time.Millisecond) // the kernel has no event for a stop but to the parent's wait
	}
}

// Thaw continues a process that Freeze stopped.
func Thaw(pid int) error { return syscall.Kill(pid, syscall.SIGCONT) }

// allStopped reports whether every thread of pid is in the stopped state.
func allStopped(pid int) (bool, error) {
	tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	if err != nil || len(tasks) == 0 {
		return false, fmt.Errorf("testenv: the threads of process %d: %v", pid, err)
	}
	for _, task := range tasks {
		f, err := readStat(task)
		if err != nil {
			return false, nil // a thread that ended meanwhile: look again
		}
		if f[0] != "T" && f[0] != "t" {
			return false, nil
		}
	}
	return true, nil
}
