package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// envDefaults reads the defaults of `dlm server`'s numeric flags from
// environment variables, as env does for the others. It keeps the first
// value it cannot read, so that a mistake in a service's environment file
// stops the server with its name instead of being ignored.
type envDefaults struct{ err error }

// int returns the integer in the environment variable key, or def when it
// is unset.
func (e *envDefaults) int(key string, def int) int {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		e.fail(key, v, "an integer")
		return def
	}
	return n
}

// duration returns the duration in the environment variable key (such as
// "500ms" or "2s"), or def when it is unset.
func (e *envDefaults) duration(key string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil {
		e.fail(key, v, "a duration such as 500ms or 2s")
		return def
	}
	return d
}

func (e *envDefaults) fail(key, v, want string) {
	if e.err == nil {
		e.err = fmt.Errorf("%s=%q: want %s", key, v, want)
	}
}
