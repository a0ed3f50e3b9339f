package dlmprom_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	goredis "github.com/redis/go-redis/v9"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmprom"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/redis"
)

func TestMetricsCountWhatHappened(t *testing.T) {
	srv := testenv.StartRedis(t)
	rdb := goredis.NewClient(&goredis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	reg := prometheus.NewPedanticRegistry()
	c := dlm.New(redis.New(rdb), dlm.WithMetrics(dlmprom.New(reg)))
	ctx := t.Context()

	// Renewals every TTL/3; a TTL that a late renewal on a loaded machine
	// does not miss, so that the one loss counted is the one made below.
	l, err := c.Acquire(ctx, "m", dlm.WithTTL(3*time.Second), dlm.WithAutoRenew(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, "m", dlm.WithWait(0)); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("second acquire: %v", err)
	}
	if _, err := c.Acquire(ctx, ""); !errors.Is(err, dlm.ErrInvalid) {
		t.Fatalf("bad acquire: %v", err)
	}
	// Two renewals, then the key vanishes and the lease is lost.
	deadline := time.Now().Add(20 * time.Second)
	for counterValue(t, reg, "dlm_client_renewals_total", "ok") < 2 {
		if time.Now().After(deadline) {
			t.Fatal("no renewals recorded")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rdb.Del(context.Background(), "dlm:{m}")
	<-l.Lost()
	l2, err := c.Acquire(ctx, "m", dlm.WithWait(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := l2.Release(ctx); err != nil {
		t.Fatal(err)
	}

	want := map[string]float64{"acquired": 2, "contended": 1, "failed": 1}
	for outcome, n := range want {
		if got := counterValue(t, reg, "dlm_client_acquires_total", outcome); got != n {
			t.Errorf("acquires{outcome=%s} = %v, want %v", outcome, got, n)
		}
	}
	if got := counterValue(t, reg, "dlm_client_lost_total", ""); got != 1 {
		t.Errorf("lost = %v, want 1", got)
	}
	if got := counterValue(t, reg, "dlm_client_releases_total", ""); got != 1 {
		t.Errorf("releases = %v, want 1", got)
	}
	if n, err := testutil.GatherAndCount(reg, "dlm_client_acquire_duration_seconds"); err != nil || n != 3 {
		t.Errorf("latency series = %d (%v), want 3 outcomes", n, err)
	}
}

// counterValue returns the value of the counter series name whose label
// set includes the value label ("" for the only series), or 0.
func counterValue(t *testing.T, reg *prometheus.Registry, name, label string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if label == "" || lp.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
