// Package indexheap is a min-heap whose items record their place in it, so
// that an item can be moved or taken out by itself: the expiries that a
// store keeps with one timer, armed for the earliest.
package indexheap

// An Item orders itself before another, and holds its place in a heap
// (Slot, -1 while it is in none). A new item's slot must be -1.
type Item[T any] interface {
	Before(other T) bool
	Slot() *int
}

// Heap holds items, the earliest first. The zero value is an empty heap.
// It is not safe for concurrent use.
type Heap[T Item[T]] struct{ items []T }

// Len returns the number of items.
func (h *Heap[T]) Len() int { return len(h.items) }

// Min returns the earliest item; the heap must not be empty.
func (h *Heap[T]) Min() T { return h.items[0] }

// Set adds x, or moves it to its place after its order changed.
func (h *Heap[T]) Set(x T) {
	i := *x.Slot()
	if i < 0 {
		i = len(h.items)
		h.items = append(h.items, x)
		*x.Slot() = i
	}
	if !h.down(i) {
		h.up(i)
	}
}

// Remove takes x out, when it is in.
func (h *Heap[T]) Remove(x T) {
	i := *x.Slot()
	if i < 0 {
		return
	}
	last := len(h.items) - 1
	if i != last {
		h.swap(i, last)
	}
	var zero T
	h.items[last] = zero
	h.items = h.items[:last]
	*x.Slot() = -1
	if i != last && !h.down(i) {
		h.up(i)
	}
}

func (h *Heap[T]) swap(i, j int) {
	h.items[i], h.items[j] = h.items[j], h.items[i]
	*h.items[i].Slot(), *h.items[j].Slot() = i, j
}

func (h *Heap[T]) up(i int) {
	for i > 0 {
		parent := (i - 1) / 2
		if !h.items[i].Before(h.items[parent]) {
			return
		}
		h.swap(i, parent)
		i = parent
	}
}

// down moves item i towards the leaves, and reports whether it moved.
func (h *Heap[T]) down(i int) bool {
	start := i
	for {
		least := i
		for _, c := range [2]int{2*i + 1, 2*i + 2} {
			if c < len(h.items) && h.items[c].Before(h.items[least]) {
				least = c
			}
		}
		if least == i {
			return i > start
		}
		h.swap(i, least)
		i = least
	}
}
