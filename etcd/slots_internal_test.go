package etcd

import "testing"

func TestSlots(t *testing.T) {
	s := &Store{prefix: "p/"}
	ss := &session{id: 0xab}
	key := func(owner string) string { return s.keyOf(ss, "r", s.dir("r"), owner) }
	want := func(owner, k string) {
		t.Helper()
		if got := key(owner); got != k {
			t.Fatalf("key of %s = %q, want %q", owner, got, k)
		}
	}
	want("A", "p/r/ab-0")
	want("B", "p/r/ab-1")
	want("A", "p/r/ab-0") // a retry keeps its key

	s.leaveSlot(ss, "r", "A", true)
	want("C", "p/r/ab-0") // freed: the next request takes it

	s.leaveSlot(ss, "r", "B", false)
	want("D", "p/r/ab-2") // retired: never again in this session

	s.unsure(ss, "r", "D")
	s.leaveSlot(ss, "r", "D", true)
	want("E", "p/r/ab-3") // a call of D failed without an answer: retired too

	s.leaveSlot(ss, "r", "C", true)
	s.leaveSlot(ss, "r", "E", true)
	want("F", "p/r/ab-0")
	if got := s.keyOf(&session{id: 0xcd}, "r", s.dir("r"), "F"); got != "p/r/cd-0" {
		t.Fatalf("another session's key = %q, want its own lease in it", got)
	}
}
