package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/storeurl"
)

// storeOptions are the options every command opens its store with: its
// label, and the bearer token file in $DLM_TOKEN_FILE for a dlm server
// (sent over TLS only; a dlm:// URL's own token_file takes precedence).
func storeOptions(label string, more ...storeurl.Option) []storeurl.Option {
	return append([]storeurl.Option{storeurl.WithLabel(label), storeurl.WithTokenFile(os.Getenv("DLM_TOKEN_FILE"))}, more...)
}

// redisLog passes the Redis client library's own log lines (such as a
// failed dial, which dlm also reports as an error) to log at debug level.
type redisLog struct{ log *slog.Logger }

func (l redisLog) Printf(ctx context.Context, format string, v ...any) {
	l.log.DebugContext(ctx, "redis client: "+fmt.Sprintf(format, v...))
}

// quietRedis sends the Redis client library's log, which it writes to
// stderr by default, to log at debug level: a store that is down is
// reported once, as the command's error.
func quietRedis(log *slog.Logger) { goredis.SetLogger(redisLog{log}) }
