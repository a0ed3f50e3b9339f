package raftnode

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/dlmhq/dlm/server/internal/ratelog"
)

// hclogAdapter lets hashicorp/raft, which wants an hclog.Logger, log through
// a *slog.Logger. Raft's logger name becomes the "logger" attribute.
//
// While quiet reports true (the node's storage fails, and Raft steps down,
// is elected and fails again over and over), each of Raft's messages is
// written once and then at most once per raftQuietInterval, with the count
// of those left out.
type hclogAdapter struct {
	log   *slog.Logger
	name  string
	args  []any
	quiet func() bool
	rate  *ratelog.Limiter
}

var _ hclog.Logger = (*hclogAdapter)(nil)

// raftQuietInterval is how often one message of Raft's is written while
// the adapter is quiet.
const raftQuietInterval = 30 * time.Second

// newHclog returns the adapter of l; quiet may be nil (never quiet).
func newHclog(l *slog.Logger, quiet func() bool) hclog.Logger {
	return &hclogAdapter{log: l, quiet: quiet, rate: ratelog.New(raftQuietInterval)}
}

func slogLevel(l hclog.Level) slog.Level {
	switch l {
	case hclog.Trace:
		return slog.LevelDebug - 4
	case hclog.Debug:
		return slog.LevelDebug
	case hclog.Warn:
		return slog.LevelWarn
	case hclog.Error:
		return slog.LevelError
	}
	return slog.LevelInfo
}

// Log logs msg with key/value args at level.
func (h *hclogAdapter) Log(level hclog.Level, msg string, args ...any) {
	lvl := slogLevel(level)
	ctx := context.Background()
	if !h.log.Enabled(ctx, lvl) {
		return
	}
	if lvl >= slog.LevelInfo && h.quiet != nil && h.quiet() {
		ok, n := h.rate.Allow(h.name + "\x00" + msg)
		if !ok {
			return
		}
		if n > 0 {
			args = append(args[:len(args):len(args)], "suppressed", n)
		}
	}
	all := make([]any, 0, len(h.args)+len(args)+2)
	if h.name != "" {
		all = append(all, "logger", h.name)
	}
	all = append(all, h.args...)
	for _, a := range args {
		if f, ok := a.(hclog.Format); ok && len(f) > 0 { // hclog.Fmt values
			if format, ok := f[0].(string); ok {
				a = fmt.Sprintf(format, f[1:]...)
			}
		}
		all = append(all, a)
	}
	h.log.Log(ctx, lvl, msg, all...)
}

// Trace logs at trace level (below slog's debug).
func (h *hclogAdapter) Trace(msg string, args ...any) { h.Log(hclog.Trace, msg, args...) }

// Debug logs at debug level.
func (h *hclogAdapter) Debug(msg string, args ...any) { h.Log(hclog.Debug, msg, args...) }

// Info logs at info level.
func (h *hclogAdapter) Info(msg string, args ...any) { h.Log(hclog.Info, msg, args...) }

// Warn logs at warn level.
func (h *hclogAdapter) Warn(msg string, args ...any) { h.Log(hclog.Warn, msg, args...) }

// Error logs at error level.
func (h *hclogAdapter) Error(msg string, args ...any) { h.Log(hclog.Error, msg, args...) }

func (h *hclogAdapter) enabled(l hclog.Level) bool {
	return h.log.Enabled(context.Background(), slogLevel(l))
}

// IsTrace reports whether trace logs are kept.
func (h *hclogAdapter) IsTrace() bool { return h.enabled(hclog.Trace) }

// IsDebug reports whether debug logs are kept.
func (h *hclogAdapter) IsDebug() bool { return h.enabled(hclog.Debug) }

// IsInfo reports whether info logs are kept.
func (h *hclogAdapter) IsInfo() bool { return h.enabled(hclog.Info) }

// IsWarn reports whether warnings are kept.
func (h *hclogAdapter) IsWarn() bool { return h.enabled(hclog.Warn) }

// IsError reports whether errors are kept.
func (h *hclogAdapter) IsError() bool { return h.enabled(hclog.Error) }

// ImpliedArgs returns the args added by With.
func (h *hclogAdapter) ImpliedArgs() []any { return h.args }

// With returns a logger that adds args to every record.
func (h *hclogAdapter) With(args ...any) hclog.Logger {
	c := *h
	c.args = append(append([]any(nil), h.args...), args...)
	return &c
}

// Name returns the logger's name.
func (h *hclogAdapter) Name() string { return h.name }

// Named returns a logger whose name has name appended.
func (h *hclogAdapter) Named(name string) hclog.Logger {
	if h.name != "" {
		name = h.name + "." + name
	}
	return h.ResetNamed(name)
}

// ResetNamed returns a logger named name.
func (h *hclogAdapter) ResetNamed(name string) hclog.Logger {
	c := *h
	c.name = name
	return &c
}

// SetLevel does nothing: the slog handler decides the level.
func (h *hclogAdapter) SetLevel(hclog.Level) {}

// GetLevel returns the lowest level the slog handler keeps.
func (h *hclogAdapter) GetLevel() hclog.Level {
	for _, l := range []hclog.Level{hclog.Trace, hclog.Debug, hclog.Info, hclog.Warn} {
		if h.enabled(l) {
			return l
		}
	}
	return hclog.Error
}

// StandardLogger returns a log.Logger writing to the slog handler at info.
func (h *hclogAdapter) StandardLogger(*hclog.StandardLoggerOptions) *log.Logger {
	return slog.NewLogLogger(h.log.Handler(), slog.LevelInfo)
}

// StandardWriter returns a writer logging each write at info.
func (h *hclogAdapter) StandardWriter(*hclog.StandardLoggerOptions) io.Writer {
	return h.StandardLogger(nil).Writer()
}
