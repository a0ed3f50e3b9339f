package testenv

import (
	"errors"
	"os"
	"syscall"
)

// Fill writes a file at path until its file system is full (ENOSPC), for
// tests and fault runs that fill a disk; any other error is returned.
func Fill(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, chunk := range []int{1 << 20, 4 << 10, 1} {
		buf := make([]byte, chunk)
		for {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					return err
				}
				break
			}
		}
	}
	return nil
}
