package main

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/workload"
)

func TestMedianRow(t *testing.T) {
	round := func(p50 time.Duration, rate float64, violations int, err string) row {
		return row{ID: "x", Name: "X", Err: err,
			Results: []workload.Result{
				{Workload: "uncontended", P50: p50},
				{Workload: "distinct-keys", PerSecond: rate, Violations: violations},
			},
			Costs: []cost{{CPUPerCycle: p50}, {CPUPerCycle: time.Duration(rate)}},
		}
	}
	t.Run("one round is kept as it is", func(t *testing.T) {
		r := round(time.Millisecond, 10, 0, "")
		got := medianRow([]row{r})
		if got.Results[0].P50 != time.Millisecond || got.Results[1].PerSecond != 10 {
			t.Fatalf("got %+v", got)
		}
	})
	t.Run("three rounds: the median of each workload, violations summed", func(t *testing.T) {
		got := medianRow([]row{
			round(3*time.Millisecond, 100, 0, ""),
			round(1*time.Millisecond, 300, 2, ""),
			round(2*time.Millisecond, 200, 0, "round 3 failed"),
		})
		if p := got.Results[0].P50; p != 2*time.Millisecond {
			t.Errorf("uncontended p50 = %v, want the median 2ms", p)
		}
		if c := got.Costs[0].CPUPerCycle; c != 2*time.Millisecond {
			t.Errorf("the cost is not the median round's: %v", c)
		}
		if r := got.Results[1].PerSecond; r != 200 {
			t.Errorf("distinct-keys rate = %v, want the median 200", r)
		}
		if c := got.Costs[1].CPUPerCycle; c != 200 {
			t.Errorf("the cost is not the median round's: %v", c)
		}
		if v := got.Results[1].Violations; v != 2 {
			t.Errorf("violations = %d, want 2: one broken round must show", v)
		}
		if got.Err != "round 3 failed" {
			t.Errorf("err = %q", got.Err)
		}
	})
	t.Run("two rounds: the worse", func(t *testing.T) {
		got := medianRow([]row{round(time.Millisecond, 300, 0, ""), round(2*time.Millisecond, 100, 0, "")})
		if got.Results[0].P50 != 2*time.Millisecond || got.Results[1].PerSecond != 100 {
			t.Fatalf("got %+v", got.Results)
		}
	})
}
