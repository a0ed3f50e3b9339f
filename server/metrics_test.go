package server

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/raftnode"
)

// gathered reads a registry: value returns a gauge's or counter's value,
// count a histogram's sample count, by name and label pairs.
type gathered struct {
	t      *testing.T
	values map[string]float64
	counts map[string]uint64
}

func gather(t *testing.T, reg prometheus.Gatherer) *gathered {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	g := &gathered{t: t, values: map[string]float64{}, counts: map[string]uint64{}}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, lp := range m.GetLabel() {
				key += "," + lp.GetName() + "=" + lp.GetValue()
			}
			switch {
			case m.GetGauge() != nil:
				g.values[key] = m.GetGauge().GetValue()
			case m.GetCounter() != nil:
				g.values[key] = m.GetCounter().GetValue()
			case m.GetHistogram() != nil:
				g.counts[key] = m.GetHistogram().GetSampleCount()
				g.values[key+",sum"] = m.GetHistogram().GetSampleSum()
			}
		}
	}
	return g
}

func (g *gathered) value(key string) float64 {
	g.t.Helper()
	v, ok := g.values[key]
	if !ok {
		g.t.Fatalf("no metric %s", key)
	}
	return v
}

func TestMetricsRaftStateApplyLatencyAndGrants(t *testing.T) {
	s := startServer(t, Config{})
	a, _ := open(t, s, 0, time.Minute)
	b, _ := open(t, s, 0, time.Minute)
	g := a.granted(a.lock("m", dlmpb.Mode_MODE_EX))
	b.lock("m", dlmpb.Mode_MODE_EX)
	b.recvSkipAcks() // Queued
	a.release(g.GetLockId())
	b.granted(0)

	m := gather(t, s.metrics.reg)
	for state, want := range map[string]float64{"leader": 1, "follower": 0, "candidate": 0, "shutdown": 0} {
		if v := m.value("dlm_server_raft_state,state=" + state); v != want {
			t.Errorf("dlm_server_raft_state{state=%q} = %v, want %v", state, v, want)
		}
	}
	if v := m.value("dlm_server_raft_term"); v < 1 {
		t.Errorf("dlm_server_raft_term = %v, want at least 1", v)
	}
	if v := m.value("dlm_server_leader_terms_total"); v != 1 {
		t.Errorf("dlm_server_leader_terms_total = %v, want 1", v)
	}
	// Grants are counted among the lock events by kind.
	if v := m.value("dlm_server_lock_events_total,kind=Granted"); v != 2 {
		t.Errorf(`dlm_server_lock_events_total{kind="Granted"} = %v, want 2`, v)
	}
	// Two opens, two locks and a release: five proposals applied.
	if n := m.counts["dlm_server_apply_duration_seconds"]; n < 5 {
		t.Errorf("dlm_server_apply_duration_seconds counts %d proposals, want at least 5", n)
	}
	if sum := m.value("dlm_server_apply_duration_seconds,sum"); sum <= 0 || sum > 10 {
		t.Errorf("dlm_server_apply_duration_seconds sum %v s", sum)
	}
	if v := m.value("dlm_server_event_streams"); v != 0 {
		t.Errorf("dlm_server_event_streams = %v with none open", v)
	}

	// The same over HTTP, with a feed open.
	f := openFeed(t, s, "")
	f.next()
	resp, err := http.Get("http://" + s.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`dlm_server_raft_state{state="leader"} 1`,
		`dlm_server_raft_state{state="follower"} 0`,
		`dlm_server_apply_duration_seconds_bucket{le="+Inf"}`,
		`dlm_server_raft_term `,
		`dlm_server_event_streams 1`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// A closed node reports the shutdown state.
func TestMetricsRaftStateAfterClose(t *testing.T) {
	s, err := Start(Config{Node: raftnode.Config{InMemory: true, Raft: servertest.FastRaft}, HTTPAddr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m := gather(t, s.metrics.reg)
	if m.value("dlm_server_raft_state,state=shutdown") != 1 || m.value("dlm_server_raft_state,state=leader") != 0 {
		t.Fatalf("after Close: %v", m.values)
	}
}
