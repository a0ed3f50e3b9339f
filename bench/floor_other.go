//go:build !linux

package main

import "os"

// fdatasync flushes f (an fsync where there is no fdatasync).
func fdatasync(f *os.File) error { return f.Sync() }
