package redlock_test

import (
	"context"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/redlock"
)

// BenchmarkAcquireRelease measures one uncontended acquire and release on
// five nodes, asking the nodes at once (the store) or one after another
// (naive Redlock clients).
func BenchmarkAcquireRelease(b *testing.B) {
	e := newEnv(b)
	modes := []struct {
		name string
		opts []redlock.Option
	}{
		{"parallel", nil},
		{"sequential", []redlock.Option{redlock.WithSequential()}},
	}
	for _, m := range modes {
		b.Run(m.name, func(b *testing.B) {
			s := e.store(m.opts...)
			ctx := context.Background()
			name := storetest.Resource(b)
			for b.Loop() {
				req := request(name, 10*time.Second)
				g, err := s.Acquire(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				if err := s.Release(ctx, req, g); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// go test -run '^$' -bench . -benchtime 2s ./redlock/

// benchClient returns a dlm client over five fresh nodes, with the store's
// default options (as storeurl opens it).
func benchClient(b *testing.B) *dlm.Client {
	return dlm.New(redlock.New(newEnv(b).clients()))
}

func BenchmarkUncontended(b *testing.B) { storetest.Uncontended(b, benchClient(b)) }

func BenchmarkContendedHandoff(b *testing.B) { storetest.ContendedHandoff(b, benchClient(b)) }
