package main

import (
	"flag"
	"fmt"

	"github.com/dlmhq/dlm/locktable"
)

// limitFlag is one `dlm server` flag for a bound of the lock table.
type limitFlag struct {
	name, env, usage string
	v                func(*locktable.Limits) *int
	def              int
}

// limitFlags are the table limits `dlm server` takes as flags. Every node
// of a cluster must use the same values: they decide which requests the
// replicated table refuses.
var limitFlags = []limitFlag{
	{"max-sessions", "DLM_MAX_SESSIONS", "most open sessions", func(l *locktable.Limits) *int { return &l.MaxSessions }, locktable.DefaultMaxSessions},
	{"max-locks-per-session", "DLM_MAX_LOCKS_PER_SESSION", "most locks (granted or queued) of one session", func(l *locktable.Limits) *int { return &l.MaxLocksPerSession }, locktable.DefaultMaxLocksPerSession},
	{"max-waiters-per-resource", "DLM_MAX_WAITERS_PER_RESOURCE", "most queued requests and conversions of one resource", func(l *locktable.Limits) *int { return &l.MaxWaitersPerResource }, locktable.DefaultMaxWaitersPerResource},
	{"max-locks-per-resource", "DLM_MAX_LOCKS_PER_RESOURCE", "most locks (granted or queued, any mode) of one resource", func(l *locktable.Limits) *int { return &l.MaxLocksPerResource }, locktable.DefaultMaxLocksPerResource},
	{"max-locks", "DLM_MAX_LOCKS", "most locks (granted or queued) of the whole server", func(l *locktable.Limits) *int { return &l.MaxLocks }, locktable.DefaultMaxLocks},
}

// registerLimits adds the limit flags to fs, to be read into lim, with
// their defaults from their environment variables through e.
func registerLimits(fs *flag.FlagSet, lim *locktable.Limits, e *envDefaults) {
	for _, f := range limitFlags {
		fs.IntVar(f.v(lim), f.name, e.int(f.env, f.def), f.usage+" (the same on every node of a cluster; env "+f.env+")")
	}
}

// checkLimits returns an error naming the first limit flag that is not
// positive.
func checkLimits(lim *locktable.Limits) error {
	for _, f := range limitFlags {
		if v := *f.v(lim); v <= 0 {
			return fmt.Errorf("-%s %d: want a positive number", f.name, v)
		}
	}
	return nil
}
