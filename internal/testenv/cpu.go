package testenv

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTick is the unit of utime and stime in /proc/PID/stat (USER_HZ,
// 100 on Linux).
const clockTick = 10 * time.Millisecond

// ProcessCPU returns the user and system CPU time a process has used so
// far, from /proc/PID/stat (Linux only), in 10 ms ticks.
func ProcessCPU(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("testenv: /proc/%d/stat: bad utime or stime", pid)
	}
	return time.Duration(utime+stime) * clockTick, nil
}

// statFields returns the fields of /proc/PID/stat from the third on (the
// state), so that field n of proc(5) is at index n-3.
func statFields(pid int) ([]string, error) {
	return readStat(fmt.Sprintf("/proc/%d/stat", pid))
}

// readStat returns the fields of a stat file of /proc (a process's, or
// one of its threads' under task/) from the third on (the state).
func readStat(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	// The command name (field 2) may hold spaces: count from its ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("testenv: %s: no command name", path)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 15 { // up to cstime, field 17
		return nil, fmt.Errorf("testenv: %s: %d fields", path, len(f)+2)
	}
	return f, nil
}

// ProcessTreeCPU returns the CPU time of a process and of its descendants:
// its own user and system time, that of its children it has reaped (the
// cutime and cstime of /proc/PID/stat), and that of its live descendants
// (through /proc/PID/task/PID/children). A server that forks a process per
// connection (PostgreSQL) is charged with all of them.
func ProcessTreeCPU(pid int) (time.Duration, error) {
	f, err := statFields(pid)
	if err != nil {
		return 0, err
	}
	var total int64
	for _, i := range []int{11, 12, 13, 14} { // utime, stime, cutime, cstime
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("testenv: /proc/%d/stat: bad field %d", pid, i+3)
		}
		total += n
	}
	cpu := time.Duration(total) * clockTick
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	if err != nil {
		return 0, err
	}
	for _, c := range strings.Fields(string(b)) {
		child, err := strconv.Atoi(c)
		if err != nil {
			continue
		}
		// A child that exited meanwhile is counted once its parent
		// reaps it.
		if d, err := ProcessTreeCPU(child); err == nil {
			cpu += d
		}
	}
	return cpu, nil
}
