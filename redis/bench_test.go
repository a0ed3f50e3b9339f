package redis_test

import (
	"testing"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
)

// go test -run '^$' -bench . -benchtime 2s ./redis/

// benchClient returns a client over a fresh server.
func benchClient(b *testing.B) *dlm.Client {
	c, _ := newEnv(b).client()
	return c
}

func BenchmarkUncontended(b *testing.B) { storetest.Uncontended(b, benchClient(b)) }

func BenchmarkParallelDistinctKeys(b *testing.B) { storetest.ParallelDistinctKeys(b, benchClient(b)) }

func BenchmarkContendedHandoff(b *testing.B) { storetest.ContendedHandoff(b, benchClient(b)) }
