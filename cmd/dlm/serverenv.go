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
	return envValue(e, key, def, strconv.Atoi, "an integer")
}

// uint64 returns the unsigned integer in the environment variable key, or
// def when it is unset.
func (e *envDefaults) uint64(key string, def uint64) uint64 {
	return envValue(e, key, def, func(v string) (uint64, error) { return strconv.ParseUint(v, 10, 64) }, "a non-negative integer")
}

// duration returns the duration in the environment variable key (such as
// "500ms" or "2s"), or def when it is unset.
func (e *envDefaults) duration(key string, def time.Duration) time.Duration {
	return envValue(e, key, def, time.ParseDuration, "a duration such as 500ms or 2s")
}

// envValue parses the environment variable key, or returns def when it is
// unset or cannot be parsed (then e keeps the error, saying what it wants).
func envValue[T any](e *envDefaults, key string, def T, parse func(string) (T, error), want string) T {
	v, ok := os.LookupEnv(key)
	if !ok {
		return def
	}
	x, err := parse(strings.TrimSpace(v))
	if err != nil {
		if e.err == nil {
			e.err = fmt.Errorf("%s=%q: want %s", key, v, want)
		}
		return def
	}
	return x
}
