package storetest

import (
	"strings"
	"testing"
	"time"
)

func TestResourceIsUnique(t *testing.T) {
	a, b := Resource(t), Resource(t)
	if a == b || !strings.HasPrefix(a, t.Name()+"/") {
		t.Fatalf("Resource gave %q and %q", a, b)
	}
}

func TestWithinAndAwait(t *testing.T) {
	ch := make(chan struct{})
	time.AfterFunc(10*time.Millisecond, func() { close(ch) })
	if d := Within(t, ch, 5*time.Second, "close"); d <= 0 {
		t.Fatalf("Within returned %s", d)
	}
	n := 0
	Await(t, 5*time.Second, "three polls", func() bool { n++; return n == 3 })
}

func TestGoroutinesSkipsTestCode(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	go func() { <-stop }() // a goroutine of this test: not counted
	if n := Goroutines("storetest"); n != 0 {
		t.Fatalf("Goroutines counted %d goroutines of test code", n)
	}
	if n := Goroutines("runtime.Stack"); n != 0 {
		t.Fatalf("Goroutines counted its caller, a test: %d", n)
	}
}
