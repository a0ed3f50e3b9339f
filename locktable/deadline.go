package locktable

// deadlineHeap is a min-heap of queued requests with a deadline, ordered
// by (deadline, lock id) so that ties break deterministically.
type deadlineHeap []*lock

func (h deadlineHeap) less(i, j int) bool {
	a, b := h[i], h[j]
	if a.deadline != b.deadline {
		return a.deadline < b.deadline
	}
	return a.id < b.id
}

func (h deadlineHeap) swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = int32(i)
	h[j].heapIdx = int32(j)
}

func (h deadlineHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(i, p) {
			return
		}
		h.swap(i, p)
		i = p
	}
}

func (h deadlineHeap) down(i int) {
	for {
		c := 2*i + 1
		if c >= len(h) {
			return
		}
		if c+1 < len(h) && h.less(c+1, c) {
			c++
		}
		if !h.less(c, i) {
			return
		}
		h.swap(i, c)
		i = c
	}
}

// push adds l, whose deadline is set.
func (h *deadlineHeap) push(l *lock) {
	l.heapIdx = int32(len(*h))
	*h = append(*h, l)
	h.up(len(*h) - 1)
}

// remove takes l out of the heap.
func (h *deadlineHeap) remove(l *lock) {
	i := int(l.heapIdx)
	last := len(*h) - 1
	if i != last {
		h.swap(i, last)
	}
	(*h)[last] = nil
	*h = (*h)[:last]
	if i != last {
		h.down(i)
		h.up(i)
	}
	l.heapIdx = -1
}

// NextDeadline returns the earliest deadline of any queued request, in
// Unix nanoseconds, and ok=false if no queued request has one. The caller
// should call Advance once its clock reaches it (a Raft leader proposes a
// tick command).
func (t *Table) NextDeadline() (deadline int64, ok bool) {
	if len(t.deadlines) == 0 {
		return 0, false
	}
	return t.deadlines[0].deadline, true
}

// Advance moves the table clock to st.Now and times out every queued
// request whose deadline is at or before it (EventTimedOut; a timed-out
// conversion leaves the lock in its old mode), then grants what became
// grantable. Other operations time out only the queue heads they would
// otherwise grant, so callers should call Advance when NextDeadline passes.
func (t *Table) Advance(st Stamp) Result {
	t.begin(st)
	for len(t.deadlines) > 0 && t.deadlines[0].deadline <= t.now {
		t.abortRequest(t.deadlines[0], EventTimedOut, ReasonNone)
	}
	t.settle()
	return t.result(0, StatusNone, 0)
}
