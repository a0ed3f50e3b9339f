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

func TestVersus(t *testing.T) {
	target := func(id string, p50s []time.Duration, rates []float64) row {
		var rounds []row
		for i := range p50s {
			rounds = append(rounds, row{ID: id, Results: []workload.Result{
				{Workload: "uncontended", P50: p50s[i], Ops: 1},
				{Workload: "distinct-keys", PerSecond: rates[i], Ops: 1},
			}, Costs: []cost{{}, {}}})
		}
		return medianRow(rounds)
	}
	ms, us := time.Millisecond, time.Microsecond
	t.Run("the median of the rounds' ratios, not the ratio of the medians", func(t *testing.T) {
		// In two rounds of three the target takes 5/6 of the
		// alternative's time; in the third it is twice as slow. Its
		// median (2 ms) is above the alternative's (1.5 ms), because
		// the round where it was slow is the one where the
		// alternative was quick.
		a := target("a", []time.Duration{1000 * us, 2000 * us, 3000 * us}, []float64{1, 1, 1})
		b := target("b", []time.Duration{1200 * us, 2400 * us, 1500 * us}, []float64{1, 1, 1})
		got, ok := versus("uncontended", a, b, byP50, false)
		if !ok || got.rounds != 3 {
			t.Fatalf("versus = %+v, %v", got, ok)
		}
		if want := 1000.0 / 1200; got.x != want || got.lo != want || got.hi != 2 {
			t.Errorf("versus = %+v, want the median %.3f of rounds %.3f-2.00", got, want, want)
		}
		if s := got.String(); s != "0.83× (rounds 0.83-2.00)" {
			t.Errorf("String() = %q", s)
		}
	})
	t.Run("two rounds: the middle one worse for the target", func(t *testing.T) {
		a := target("a", []time.Duration{ms, ms}, []float64{100, 120})
		b := target("b", []time.Duration{ms, 2 * ms}, []float64{100, 100})
		lat, _ := versus("uncontended", a, b, byP50, false)
		if lat.x != 1 {
			t.Errorf("p50 ratio = %.2f, want the higher 1.00", lat.x)
		}
		thr, _ := versus("distinct-keys", a, b, byRate, true)
		if thr.x != 1 {
			t.Errorf("rate ratio = %.2f, want the lower 1.00", thr.x)
		}
	})
	t.Run("a round that failed on either side is left out", func(t *testing.T) {
		a := target("a", []time.Duration{ms, ms, ms}, []float64{1, 1, 1})
		b := target("b", []time.Duration{ms, 2 * ms, 4 * ms}, []float64{1, 1, 1})
		b.rounds[2].Err = "broke"
		got, _ := versus("uncontended", a, b, byP50, false)
		if got.rounds != 2 || got.lo != 0.5 || got.hi != 1 {
			t.Errorf("versus = %+v, want rounds 1 and 2", got)
		}
	})
	t.Run("one round: the ratio of the results", func(t *testing.T) {
		a := target("a", []time.Duration{3 * ms}, []float64{1})
		b := target("b", []time.Duration{2 * ms}, []float64{1})
		got, ok := versus("uncontended", a, b, byP50, false)
		if !ok || got.x != 1.5 || got.String() != "1.50×" {
			t.Errorf("versus = %+v (%s), %v", got, got, ok)
		}
	})
	t.Run("nothing measured on one side", func(t *testing.T) {
		a := target("a", []time.Duration{ms}, []float64{1})
		if _, ok := versus("uncontended", a, row{ID: "b"}, byP50, false); ok {
			t.Error("versus reported a ratio without the alternative's figure")
		}
	})
}
