package main

import "syscall"

// commandAttr puts the command in its own process group, so that a lost
// lock stops all of it, and has the kernel kill it if dlm run itself dies
// (SIGKILL leaves dlm run no chance to stop it, and its lock ends at the
// TTL).
func commandAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
