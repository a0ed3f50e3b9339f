package main

import (
	"os"
	"syscall"
)

// fdatasync flushes f's data, as a log store's append does.
func fdatasync(f *os.File) error {
	for {
		if err := syscall.Fdatasync(int(f.Fd())); err != syscall.EINTR {
			return err
		}
	}
}
