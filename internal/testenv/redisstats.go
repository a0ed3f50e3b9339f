package testenv

import (
	"context"
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// ScriptStats is what INFO commandstats tells of the Lua scripts that one
// or more Redis servers ran since their statistics were last reset
// (ResetRedisStats), summed over the servers.
type ScriptStats struct {
	// Scripts is the number of EVALSHA calls that ran a script.
	Scripts float64
	// Micros is the server time spent in them, in µs: the time inside the
	// scripts, without the network.
	Micros float64
	// Inner is the number of commands run inside the scripts: every
	// command but EVALSHA, EVAL, BLPOP and the housekeeping of tests and
	// clients (SCRIPT, INFO, CONFIG, HELLO, PING, CLIENT).
	Inner float64
}

// PerScript returns the server µs per script call and the commands each
// ran, on average.
func (s ScriptStats) PerScript() (micros, calls float64) {
	if s.Scripts == 0 {
		return 0, 0
	}
	return s.Micros / s.Scripts, s.Inner / s.Scripts
}

// ResetRedisStats resets the statistics of every server (CONFIG
// RESETSTAT).
func ResetRedisStats(tb testing.TB, rdbs ...*goredis.Client) {
	tb.Helper()
	for _, rdb := range rdbs {
		if err := rdb.ConfigResetStat(context.Background()).Err(); err != nil {
			tb.Fatalf("testenv: CONFIG RESETSTAT: %v", err)
		}
	}
}

// RedisScriptStats reads INFO commandstats on every server and sums them.
func RedisScriptStats(tb testing.TB, rdbs ...*goredis.Client) ScriptStats {
	tb.Helper()
	var s ScriptStats
	for _, rdb := range rdbs {
		info, err := rdb.Info(context.Background(), "commandstats").Result()
		if err != nil {
			tb.Fatalf("testenv: INFO commandstats: %v", err)
		}
		for _, line := range strings.Split(info, "\n") {
			name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
			if !ok || !strings.HasPrefix(name, "cmdstat_") {
				continue
			}
			calls := statField(stats, "calls")
			name, _, _ = strings.Cut(name, "|") // a subcommand counts as its command
			switch name {
			case "cmdstat_evalsha":
				// A call the node refused for not knowing the script
				// (NOSCRIPT; the client loads it and calls again) ran
				// nothing.
				s.Scripts += calls - statField(stats, "failed_calls")
				s.Micros += statField(stats, "usec")
			case "cmdstat_eval", "cmdstat_script", "cmdstat_info", "cmdstat_config", "cmdstat_blpop", "cmdstat_hello", "cmdstat_ping", "cmdstat_client":
			default:
				s.Inner += calls
			}
		}
	}
	return s
}

// statField returns the field of INFO commandstats's "k=v,k=v" text as a
// number, 0 when missing.
func statField(stats, field string) float64 {
	for _, kv := range strings.Split(stats, ",") {
		if v, ok := strings.CutPrefix(kv, field+"="); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}
