package fsm

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// BenchmarkFSMMemoryPerLock measures the replicated state's live heap per
// lock: 10 sessions take 10,000 EX locks each on distinct resources (names
// of 16 to 20 bytes, no metadata, every request numbered so that the reply
// cache is full), and the heap after a collection is compared with the
// heap before. It reports B/lock; the time per iteration means nothing.
func BenchmarkFSMMemoryPerLock(b *testing.B) {
	const sessions, perSession = 10, 10_000
	var total float64
	for b.Loop() {
		f := NewFSM(locktable.Limits{})
		idx := uint64(1)
		sids := make([]locktable.SessionID, sessions)
		for i := range sids {
			sids[i] = applyEntry(b, f, idx, 1, openCmd("s"))[0].Session
			idx++
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		for _, sid := range sids {
			for i := range perSession {
				applyEntry(b, f, idx, 1, lockCmd(sid, uint64(i+1), fmt.Sprintf("memory/%d/%d", sid, i), dlmpb.Mode_MODE_EX))
				idx++
			}
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		total += float64(after.HeapAlloc-before.HeapAlloc) / (sessions * perSession)
		runtime.KeepAlive(f)
	}
	b.ReportMetric(total/float64(b.N), "B/lock")
}
