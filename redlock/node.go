package redlock

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm/internal/redislua"
)

// node is one Redis master.
type node struct {
	index       int
	addr        string
	rdb         goredis.UniversalClient
	ctxTimeouts bool              // the client gives up at the context's deadline
	tasks       chan func()       // calls handed to an idle worker (see run)
	batch       *redislua.Batcher // the scripts of concurrent calls, pipelined
}

func newNode(index int, rdb goredis.UniversalClient) *node {
	n := &node{index: index, rdb: rdb, ctxTimeouts: true, tasks: make(chan func()), batch: redislua.NewBatcher(rdb)}
	switch c := rdb.(type) {
	case *goredis.Client:
		n.addr, n.ctxTimeouts = c.Options().Addr, c.Options().ContextTimeoutEnabled
	case *goredis.ClusterClient:
		n.addr, n.ctxTimeouts = strings.Join(c.Options().Addrs, ","), c.Options().ContextTimeoutEnabled
	case *goredis.Ring:
		addrs := make([]string, 0, len(c.Options().Addrs))
		for _, a := range c.Options().Addrs {
			addrs = append(addrs, a)
		}
		slices.Sort(addrs)
		n.addr, n.ctxTimeouts = strings.Join(addrs, ","), c.Options().ContextTimeoutEnabled
	default:
		n.addr = fmt.Sprint(rdb)
	}
	return n
}

// NodeError is why one node gave no answer to a call: it was unreachable,
// timed out, failed, or was inside the restart guard. ErrUnavailable errors
// join one per silent node.
type NodeError struct {
	// Index is the node's position in the clients given to New.
	Index int
	// Addr is the node's address as its client was configured.
	Addr string
	// Err is the cause. A timeout does not wrap context.DeadlineExceeded,
	// which stays reserved for the caller's own context.
	Err error
}

// Error names the node and the cause.
func (e *NodeError) Error() string {
	return fmt.Sprintf("redlock node %d (%s): %v", e.Index, e.Addr, e.Err)
}

// Unwrap returns the cause.
func (e *NodeError) Unwrap() error { return e.Err }

// recentError is the answer of a node inside the restart guard.
type recentError struct{ age, guard time.Duration }

func (e recentError) Error() string {
	return fmt.Sprintf("new, restarted or flushed %s ago: it votes again once the restart guard of %s has passed", e.age, e.guard)
}

// eval runs sc on n. With the restart guard on and guarded set, the node's
// age travels in the same round trip, and a node younger than the guard
// answers a recentError (after running sc all the same).
func (s *Store) eval(ctx context.Context, n *node, guarded bool, sc *goredis.Script, keys []string, args ...any) (any, error) {
	if s.guard == 0 || !guarded {
		return n.batch.Run(ctx, sc, keys, args...).Result()
	}
	for try := 0; ; try++ {
		pipe := n.rdb.Pipeline()
		age := redislua.RedlockAge.EvalSha(ctx, pipe, []string{s.bornKey()})
		res := sc.EvalSha(ctx, pipe, keys, args...)
		_, _ = pipe.Exec(ctx)
		if try == 0 && (noScript(age.Err()) || noScript(res.Err())) {
			// Scripts are gone after a restart or SCRIPT FLUSH.
			if err := redislua.RedlockAge.Load(ctx, n.rdb).Err(); err != nil {
				return nil, err
			}
			if err := sc.Load(ctx, n.rdb).Err(); err != nil {
				return nil, err
			}
			continue
		}
		ms, err := age.Int64()
		if err != nil {
			return nil, err
		}
		if d := time.Duration(ms) * time.Millisecond; d < s.guard {
			return nil, recentError{age: d, guard: s.guard}
		}
		return res.Result()
	}
}

func noScript(err error) bool { return goredis.HasErrorPrefix(err, "NOSCRIPT") }
