//go:build unix && !linux

package main

import "syscall"

// commandAttr puts the command in its own process group, so that a lost
// lock stops all of it.
func commandAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
