package locktable

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// liveTable returns a table with default limits where holder sessions
// (1000 locks each) hold a PR lock on each of n resources, and their
// names. Session 2 is open and holds nothing.
func liveTable(tb testing.TB, n int) (*Table, []string) {
	t := New(Limits{})
	t.OpenSession(Stamp{}, 2, "bench")
	names := make([]string, n)
	for i := range names {
		holder := SessionID(100 + i/1000)
		if i%1000 == 0 {
			t.OpenSession(Stamp{}, holder, "holder")
		}
		names[i] = "resource/" + strconv.Itoa(i)
		if _, err := t.Lock(Stamp{}, LockRequest{Session: holder, Resource: names[i], Mode: driver.PR}); err != nil {
			tb.Fatal(err)
		}
	}
	return t, names
}

func reportPairs(b *testing.B) {
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "pairs/s")
}

// BenchmarkGrantRelease: one grant and one release of a shared lock on one
// of n live resources.
func BenchmarkGrantRelease(b *testing.B) {
	for _, n := range []int{1, 1000, 100_000} {
		b.Run(fmt.Sprintf("live=%d", n), func(b *testing.B) {
			t, names := liveTable(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				st := Stamp{Index: uint64(i), Now: int64(i)}
				r, err := t.Lock(st, LockRequest{Session: 2, Resource: names[i%n], Mode: driver.PR})
				if err != nil {
					b.Fatal(err)
				}
				t.Release(st, 2, r.Lock)
			}
			reportPairs(b)
		})
	}
}

// BenchmarkGrantReleaseFresh: grant and release an exclusive lock on a
// resource nobody holds, next to n live ones: the resource is created and
// deleted each time.
func BenchmarkGrantReleaseFresh(b *testing.B) {
	for _, n := range []int{1, 1000, 100_000} {
		b.Run(fmt.Sprintf("live=%d", n), func(b *testing.B) {
			t, _ := liveTable(b, n)
			fresh := make([]string, n)
			for i := range fresh {
				fresh[i] = "fresh/" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				st := Stamp{Index: uint64(i), Now: int64(i)}
				r, err := t.Lock(st, LockRequest{Session: 2, Resource: fresh[i%n], Mode: driver.EX})
				if err != nil {
					b.Fatal(err)
				}
				t.Release(st, 2, r.Lock)
			}
			reportPairs(b)
		})
	}
}

// BenchmarkHandoff: an exclusive lock passed between two sessions through
// the wait queue (queue, release, grant from the queue, blocking notice).
func BenchmarkHandoff(b *testing.B) {
	t := New(Limits{})
	t.OpenSession(Stamp{}, 1, "")
	t.OpenSession(Stamp{}, 2, "")
	r, _ := t.Lock(Stamp{}, LockRequest{Session: 1, Resource: "x", Mode: driver.EX})
	held, holder := r.Lock, SessionID(1)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range b.N {
		st := Stamp{Index: uint64(i)}
		other := 3 - holder
		q, err := t.Lock(st, LockRequest{Session: other, Resource: "x", Mode: driver.EX})
		if err != nil || q.Status != StatusQueued {
			b.Fatal(err)
		}
		t.Release(st, holder, held)
		held, holder = q.Lock, other
	}
}

// BenchmarkSnapshot: encoding a table of 100k held locks.
func BenchmarkSnapshot(b *testing.B) {
	t, _ := liveTable(b, 100_000)
	b.ReportAllocs()
	b.ResetTimer()
	var n int
	for range b.N {
		n = len(t.Snapshot())
	}
	b.ReportMetric(float64(n), "bytes")
}

// heldLockBytes returns the heap bytes per held lock of a table with n
// exclusive locks on n distinct resources, names included.
func heldLockBytes(tb testing.TB, n int) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	t := New(Limits{MaxResources: n + 1, MaxLocksPerSession: n + 1})
	t.OpenSession(Stamp{}, 1, "")
	for i := range n {
		name := fmt.Sprintf("resource/%08d", i)
		if _, err := t.Lock(Stamp{Index: uint64(i)}, LockRequest{Session: 1, Owner: OwnerID(i), Resource: name, Mode: driver.EX}); err != nil {
			tb.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(t)
	return float64(after.HeapAlloc-before.HeapAlloc) / float64(n)
}

// BenchmarkHeldLockMemory reports heap bytes per held lock; run with
// -benchtime=1000000x for one million locks.
func BenchmarkHeldLockMemory(b *testing.B) {
	b.ReportMetric(heldLockBytes(b, max(b.N, 1000)), "bytes/lock")
}

// TestMemoryPerHeldLock: one million held locks take at most 1 KiB each.
func TestMemoryPerHeldLock(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates a million locks")
	}
	n := 1_000_000
	if raceEnabled {
		n = 200_000 // the race detector makes this slow
	}
	per := heldLockBytes(t, n)
	t.Logf("%.0f bytes per held lock (%d locks)", per, n)
	if per > 1024 {
		t.Fatalf("%.0f bytes per held lock, want at most 1024", per)
	}
}

// BenchmarkResourcePage: the first page (100 resources, 500 locks) of a
// listing of n live resources, as List and /v1/resources ask for it; the
// FSM's read lock is held that long, so applies wait behind it.
func BenchmarkResourcePage(b *testing.B) {
	for _, n := range []int{1000, 100_000, 1_000_000} {
		b.Run(fmt.Sprintf("live=%d", n), func(b *testing.B) {
			t, _ := liveTable(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				page, more := t.ResourcePage(ResourceQuery{MaxResources: 100, MaxLocks: 500})
				if len(page) != min(n, 100) || more != (n > 100) {
					b.Fatalf("page of %d resources, more %v", len(page), more)
				}
			}
		})
	}
}
