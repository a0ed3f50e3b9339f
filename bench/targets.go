package main

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/internal/workload"
	"github.com/dlmhq/dlm/storeurl"
)

// target is one lock implementation of the comparison.
type target struct {
	id    string // short, for -only and the lock names
	name  string // the row's label
	dlm   bool   // one of dlm's stores (else an alternative)
	needs string // the servers it needs: redis, postgres, etcd or dlm
	open  func(ctx context.Context, s *servers) (workload.Locker, func(), error)
	// procs are the dlm server processes whose CPU time and allocations
	// a workload is charged with (nil: not measured).
	procs func(s *servers) []*testenv.DLM
	// store returns the process ids of the store's servers (Redis,
	// PostgreSQL, etcd) whose CPU time, their children's included, a
	// workload is charged with (nil: not measured).
	store func(s *servers) []int
}

// redisPIDs returns the store function of a target on the first n Redis
// servers.
func redisPIDs(n int) func(s *servers) []int {
	return func(s *servers) []int {
		pids := make([]int, 0, n)
		for _, r := range s.redis[:min(n, len(s.redis))] {
			pids = append(pids, r.PID())
		}
		return pids
	}
}

func postgresPID(s *servers) []int { return []int{s.postgres.PID()} }

func etcdPID(s *servers) []int { return []int{s.etcd.PID()} }

// targets lists every implementation, dlm's stores first.
func targets() []target {
	return []target{
		{id: "dlm-server-1", name: "dlm server, 1 node (durable)", dlm: true, needs: "dlm",
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openURL(ctx, "dlm://"+s.dlm1.Addr())
			},
			procs: func(s *servers) []*testenv.DLM { return []*testenv.DLM{s.dlm1} }},
		{id: "dlm-server-1-grpc", name: "dlm server, 1 node (durable, session over gRPC)", dlm: true, needs: "dlm",
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openURL(ctx, "dlm://"+s.dlm1.Addr()+"?transport=grpc")
			},
			procs: func(s *servers) []*testenv.DLM { return []*testenv.DLM{s.dlm1} }},
		{id: "dlm-server-3", name: "dlm server, 3 nodes (durable)", dlm: true, needs: "dlm",
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openURL(ctx, "dlm://"+s.dlm3.Addrs())
			},
			procs: func(s *servers) []*testenv.DLM { return s.dlm3.Nodes }},
		{id: "dlm-server-mem", name: "dlm server, 1 node (in-memory log, for comparison)", dlm: true, needs: "dlm",
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openURL(ctx, "dlm://"+s.dlmMem.Addr())
			},
			procs: func(s *servers) []*testenv.DLM { return []*testenv.DLM{s.dlmMem} }},
		{id: "dlm-server-bolt", name: "dlm server, 1 node (durable, bbolt log of older data dirs)", dlm: true, needs: "dlm",
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openURL(ctx, "dlm://"+s.dlmBolt.Addr())
			},
			procs: func(s *servers) []*testenv.DLM { return []*testenv.DLM{s.dlmBolt} }},
		{id: "dlm-redis", name: "dlm redis store", dlm: true, needs: "redis", store: redisPIDs(1),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				addrs, err := s.redisAddrs(1)
				if err != nil {
					return nil, nil, err
				}
				return openURL(ctx, "redis://"+addrs[0])
			}},
		{id: "dlm-redlock-5", name: "dlm redlock store, 5 nodes", dlm: true, needs: "redis", store: redisPIDs(5),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				addrs, err := s.redisAddrs(redisNodes)
				if err != nil {
					return nil, nil, err
				}
				return openURL(ctx, "redlock://"+strings.Join(addrs, ","))
			}},
		{id: "dlm-postgres", name: "dlm postgres store", dlm: true, needs: "postgres", store: postgresPID,
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				u, err := url.Parse(s.postgres.DSN())
				if err != nil {
					return nil, nil, err
				}
				q := u.Query()
				q.Set("pool_max_conns", "80") // a connection for each of the 64 lockers
				u.RawQuery = q.Encode()
				return openURL(ctx, u.String())
			}},
		{id: "dlm-etcd", name: "dlm etcd store", dlm: true, needs: "etcd", store: etcdPID,
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openURL(ctx, "etcd://"+strings.TrimPrefix(s.etcd.Endpoint(), "http://"))
			}},
		{id: "redsync-1", name: "go-redsync/redsync, 1 node (default retry 50-250 ms)", needs: "redis", store: redisPIDs(1),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) { return openRedsync(s, 1, 0) }},
		{id: "redsync-1-fast", name: "go-redsync/redsync, 1 node (retry 1 ms)", needs: "redis", store: redisPIDs(1),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openRedsync(s, 1, time.Millisecond)
			}},
		{id: "redsync-5", name: "go-redsync/redsync, 5 nodes (default retry 50-250 ms)", needs: "redis", store: redisPIDs(5),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openRedsync(s, redisNodes, 0)
			}},
		{id: "redsync-5-fast", name: "go-redsync/redsync, 5 nodes (retry 1 ms)", needs: "redis", store: redisPIDs(5),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openRedsync(s, redisNodes, time.Millisecond)
			}},
		{id: "redislock", name: "bsm/redislock (linear retry 100 ms, as its README)", needs: "redis", store: redisPIDs(1),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openRedislock(s, 100*time.Millisecond)
			}},
		{id: "redislock-fast", name: "bsm/redislock (linear retry 1 ms)", needs: "redis", store: redisPIDs(1),
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				return openRedislock(s, time.Millisecond)
			}},
		{id: "etcd-mutex", name: "etcd concurrency.Mutex", needs: "etcd", store: etcdPID,
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				cli, err := clientv3.New(clientv3.Config{Endpoints: []string{s.etcd.Endpoint()}, DialTimeout: 5 * time.Second})
				if err != nil {
					return nil, nil, err
				}
				l := &etcdLocker{cli: cli}
				return l, func() { l.Close(); cli.Close() }, nil
			}},
		{id: "pg-advisory", name: "PostgreSQL advisory locks (pgx)", needs: "postgres", store: postgresPID,
			open: func(ctx context.Context, s *servers) (workload.Locker, func(), error) {
				l := &pgLocker{dsn: s.postgres.DSN()}
				return l, l.Close, nil
			}},
	}
}

// openURL opens one of dlm's stores by URL, as `dlm bench` does.
func openURL(ctx context.Context, rawURL string) (workload.Locker, func(), error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := storeurl.Open(ctx, rawURL, storeurl.WithLabel("dlm comparison bench"))
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", storeurl.Redact(rawURL), err)
	}
	closeStore := func() {
		cctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		st.Close(cctx)
	}
	return workload.Client(dlm.New(st.Driver())), closeStore, nil
}

func openRedsync(s *servers, n int, retry time.Duration) (workload.Locker, func(), error) {
	addrs, err := s.redisAddrs(n)
	if err != nil {
		return nil, nil, err
	}
	clients := redisClients(addrs)
	pools := make([]redis.Pool, n)
	for i, c := range clients {
		pools[i] = goredis.NewPool(c)
	}
	closeAll := func() {
		for _, c := range clients {
			c.Close()
		}
	}
	return redsyncLocker{rs: redsync.New(pools...), retry: retry}, closeAll, nil
}

func openRedislock(s *servers, retry time.Duration) (workload.Locker, func(), error) {
	addrs, err := s.redisAddrs(1)
	if err != nil {
		return nil, nil, err
	}
	c := redisClients(addrs)[0]
	return redislockLocker{c: redislock.New(c), retry: retry}, func() { c.Close() }, nil
}

// processes returns the dlm server processes and the store's server
// processes that t's workloads are charged with.
func (t target) processes(s *servers) (procs []*testenv.DLM, pids []int) {
	if t.procs != nil {
		procs = t.procs(s)
	}
	if t.store != nil {
		pids = t.store(s)
	}
	return procs, pids
}
