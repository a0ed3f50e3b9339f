package main

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/internal/testenv"
)

// redisNodes is the number of independent Redis servers: Redlock and
// redsync run across all of them, the single-Redis locks on the first.
const redisNodes = 5

// servers are the servers of one run, each on free loopback ports.
type servers struct {
	redis    []*testenv.Redis
	postgres *testenv.Postgres
	etcd     *testenv.Etcd
	dlm1     *testenv.DLM
	dlmMem   *testenv.DLM // in-memory log, for what the fsync costs
	dlmBolt  *testenv.DLM // the bbolt log of older data dirs
	dlm3     *testenv.Cluster
	bin      string // the dlm binary, when the dlm servers run
	stops    []func()
}

// dlmFlags are the flags of the benchmarked dlm servers beyond their
// ports and data directory: the command's defaults (a durable Raft log,
// -raft-timeout 1s) in place of the test helpers' quick timeouts.
var dlmFlags = []string{"-raft-timeout", "1s"}

// startServers starts what the chosen targets need.
func startServers(need map[string]bool, log *slog.Logger) (s *servers, err error) {
	s = &servers{}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	if need["redis"] {
		for range redisNodes {
			r, err := testenv.NewRedis()
			if err != nil {
				return s, err
			}
			s.stops = append(s.stops, r.Stop)
			s.redis = append(s.redis, r)
		}
		log.Info("redis-server started", "nodes", len(s.redis))
	}
	if need["postgres"] {
		if s.postgres, err = testenv.NewPostgres(); err != nil {
			return s, err
		}
		s.stops = append(s.stops, s.postgres.Stop)
		log.Info("postgres started", "addr", s.postgres.Addr())
	}
	if need["etcd"] {
		if s.etcd, err = testenv.NewEtcd(); err != nil {
			return s, err
		}
		s.stops = append(s.stops, s.etcd.Stop)
		log.Info("etcd started", "endpoint", s.etcd.Endpoint())
	}
	if need["dlm"] {
		bin, cleanup, err := testenv.BuildDLM()
		if err != nil {
			return s, err
		}
		s.stops = append(s.stops, cleanup)
		s.bin = bin
		if s.dlm1, err = testenv.NewDLM(bin, dlmFlags...); err != nil {
			return s, err
		}
		s.stops = append(s.stops, s.dlm1.Stop)
		log.Info("dlm server started", "addr", s.dlm1.Addr())
		if s.dlmMem, err = testenv.NewDLM(bin, append(dlmFlags, "-in-memory")...); err != nil {
			return s, err
		}
		s.stops = append(s.stops, s.dlmMem.Stop)
		if s.dlmBolt, err = testenv.NewDLM(bin, append(dlmFlags, "-log-store", "bolt")...); err != nil {
			return s, err
		}
		s.stops = append(s.stops, s.dlmBolt.Stop)
		if s.dlm3, err = testenv.NewCluster(bin, 3, dlmFlags...); err != nil {
			return s, err
		}
		s.stops = append(s.stops, s.dlm3.Stop)
		if _, err := s.dlm3.AwaitLeader(30 * time.Second); err != nil {
			return s, err
		}
		log.Info("dlm cluster started", "addrs", s.dlm3.Addrs())
	}
	return s, nil
}

// stop stops every server, the last started first.
func (s *servers) stop() {
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
	s.stops = nil
}

// redisAddrs returns the addresses of the first n Redis servers.
func (s *servers) redisAddrs(n int) ([]string, error) {
	if len(s.redis) < n {
		return nil, errors.New("bench: the Redis servers are not running")
	}
	addrs := make([]string, n)
	for i := range n {
		addrs[i] = s.redis[i].Addr()
	}
	return addrs, nil
}

// versions asks the running servers for their versions, for the report.
func (s *servers) versions(ctx context.Context) []string {
	var out []string
	if len(s.redis) > 0 {
		c := goredis.NewClient(&goredis.Options{Addr: s.redis[0].Addr()})
		info, err := c.InfoMap(ctx, "server").Result()
		c.Close()
		if err == nil {
			out = append(out, "Redis "+info["Server"]["redis_version"])
		}
	}
	if s.postgres != nil {
		if c, err := pgx.Connect(ctx, s.postgres.DSN()); err == nil {
			var v string
			if c.QueryRow(ctx, "SHOW server_version").Scan(&v) == nil {
				out = append(out, "PostgreSQL "+v)
			}
			c.Close(ctx)
		}
	}
	if s.etcd != nil {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{s.etcd.Endpoint()}, DialTimeout: 5 * time.Second})
		if err == nil {
			if st, err := c.Status(ctx, s.etcd.Endpoint()); err == nil {
				out = append(out, "etcd "+st.Version)
			}
			c.Close()
		}
	}
	return out
}
