package indexheap_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/dlmhq/dlm/internal/indexheap"
)

type item struct{ key, slot int }

func (a *item) Before(b *item) bool { return a.key < b.key }
func (a *item) Slot() *int          { return &a.slot }

// The heap yields its items in order through any mix of adds, moves and
// removals, and every item knows its place.
func TestOrderThroughChanges(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h indexheap.Heap[*item]
	in := map[*item]bool{}
	for range 2000 {
		switch op := r.IntN(4); {
		case op < 2 || len(in) == 0:
			it := &item{key: r.IntN(100), slot: -1}
			h.Set(it)
			in[it] = true
		case op == 2:
			for it := range in {
				it.key = r.IntN(100)
				h.Set(it)
				break
			}
		default:
			for it := range in {
				h.Remove(it)
				if it.slot != -1 {
					t.Fatalf("a removed item's slot is %d, want -1", it.slot)
				}
				delete(in, it)
				break
			}
		}
		if h.Len() != len(in) {
			t.Fatalf("Len = %d, want %d", h.Len(), len(in))
		}
	}
	var want []int
	for it := range in {
		want = append(want, it.key)
	}
	slices.Sort(want)
	var got []int
	for h.Len() > 0 {
		it := h.Min()
		got = append(got, it.key)
		h.Remove(it)
		h.Remove(it) // a second removal does nothing
	}
	if !slices.Equal(got, want) {
		t.Fatalf("drained %v, want %v", got, want)
	}
}
