package remote_test

import (
	"testing"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// go test -run '^$' -bench . -benchtime 2s ./remote/
//
// Each benchmark runs against the shared durable server (an fsync per Raft
// entry) and against a server with an in-memory log.

// modes runs fn against a durable and an in-memory server.
func modes(b *testing.B, fn func(b *testing.B, c *dlm.Client)) {
	b.Run("durable", func(b *testing.B) {
		c, _ := newClient(b)
		fn(b, c)
	})
	b.Run("in-memory", func(b *testing.B) {
		srv := testenv.StartDLM(b, bin, "-in-memory")
		fn(b, dlm.New(dial(b, srv.Addr())))
	})
}

func BenchmarkUncontended(b *testing.B) { modes(b, storetest.Uncontended) }

func BenchmarkParallelDistinctKeys(b *testing.B) { modes(b, storetest.ParallelDistinctKeys) }

func BenchmarkContendedHandoff(b *testing.B) {
	modes(b, func(b *testing.B, c *dlm.Client) { storetest.ContendedHandoff(b, c) })
}
