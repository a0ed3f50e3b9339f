package storetest

import (
	"testing"
	"time"
)

// Signalled fails the test unless ch receives a value (not a close)
// within d: a store's Watch signal. what names the awaited signal.
func Signalled(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("%s: the watch channel was closed", what)
		}
	case <-time.After(d):
		t.Fatalf("%s: no signal within %s", what, d)
	}
}

// Closes fails the test unless ch is closed within d; values received
// before the close are skipped (a Watch's signals, before it ends).
func Closes(t testing.TB, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatalf("%s: not closed within %s", what, d)
		}
	}
}
