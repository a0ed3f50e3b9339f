package etcd_test

import (
	"bufio"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/testenv"
)

// An uncontended cycle costs etcd what its own Mutex's costs: one
// transaction that finds the queue empty and creates the key, and one
// delete, with two reads in all in etcd's apply (the transaction's compare
// and the delete's previous key). The counters are etcd's own, from its
// /metrics.
func TestUncontendedCycleCost(t *testing.T) {
	e := ownEnv(t)
	c, _ := e.client()
	ctx := t.Context()
	cycle := func() {
		l, err := c.Acquire(ctx, "cost", dlm.WithWait(0))
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cycle() // opens the session: its lease
	before := etcdCounters(t, e.srv)
	const n = 50
	for range n {
		cycle()
	}
	after := etcdCounters(t, e.srv)
	for name, want := range map[string]float64{
		"etcd_mvcc_txn_total":    1,
		"etcd_mvcc_range_total":  2,
		"etcd_mvcc_put_total":    1,
		"etcd_mvcc_delete_total": 1,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",grpc_service="etcdserverpb.KV",grpc_type="unary"}`:         1,
		`grpc_server_handled_total{grpc_code="OK",grpc_method="DeleteRange",grpc_service="etcdserverpb.KV",grpc_type="unary"}`: 1,
	} {
		if got := (after[name] - before[name]) / n; got != want {
			t.Errorf("%s: %.2f per cycle, want %v", name, got, want)
		}
	}
}

// etcdCounters reads srv's metrics.
func etcdCounters(t *testing.T, srv *testenv.Etcd) map[string]float64 {
	t.Helper()
	resp, err := http.Get(srv.Endpoint() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	m := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		i := strings.LastIndexByte(line, ' ')
		if strings.HasPrefix(line, "#") || i < 0 {
			continue
		}
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] = v
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}
