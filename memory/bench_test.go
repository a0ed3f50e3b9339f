package memory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/memory"
)

// BenchmarkAcquireRelease measures one ungrouped try-lock and release at
// the driver level: the store's own cost, without package dlm.
func BenchmarkAcquireRelease(b *testing.B) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	owners := make([]string, 1024)
	for i := range owners {
		owners[i] = owner(i)
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := driver.Request{Resource: "r", Owner: owners[i%len(owners)], Mode: driver.EX, TTL: time.Minute}
		i++
		g, err := s.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, req, g); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkUncontended measures one try-lock and release through package
// dlm.
func BenchmarkUncontended(b *testing.B) {
	s := memory.New()
	defer s.Close()
	storetest.Uncontended(b, dlm.New(s))
}

// owner returns a 32-character owner id for i.
func owner(i int) string { return fmt.Sprintf("%032x", i) }

// BenchmarkAcquireReleaseGrouped is BenchmarkAcquireRelease for requests
// of a group, each of which opens and closes the group's session.
func BenchmarkAcquireReleaseGrouped(b *testing.B) {
	s := memory.New()
	defer s.Close()
	ctx := context.Background()
	owners := make([]string, 1024)
	for i := range owners {
		owners[i] = owner(i)
	}
	group := owner(1 << 20)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		req := driver.Request{Resource: "r", Owner: owners[i%len(owners)], Mode: driver.EX, TTL: time.Minute, Group: group}
		i++
		g, err := s.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, req, g); err != nil {
			b.Fatal(err)
		}
	}
}
