package server

import (
	"errors"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// A client that does not read its events has its stream ended once the
// queue passes its limit; the stream's status is ResourceExhausted.
func TestOutboxEndsASlowClient(t *testing.T) {
	ob := newOutbox(1, 3)
	msg := &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Granted{Granted: &dlmpb.Granted{LockId: 1}}}
	ob.push(msg, msg, msg)
	if msgs, ended, _ := ob.take(nil); len(msgs) != 3 || ended {
		t.Fatalf("take = %d messages, ended %v; want 3, open", len(msgs), ended)
	}
	ob.push(msg, msg)
	ob.push(msg, msg) // 4 > 3
	msgs, ended, err := ob.take(nil)
	if !ended || len(msgs) != 0 || !errors.Is(err, errSlowClient) {
		t.Fatalf("take = %d messages, ended %v, %v; want the slow client's end", len(msgs), ended, err)
	}
	if code := status.Code(endStatus(err)); code != codes.ResourceExhausted {
		t.Fatalf("stream status %v, want ResourceExhausted", code)
	}
	ob.push(msg) // ignored after the end
	if msgs, _, _ := ob.take(nil); len(msgs) != 0 {
		t.Fatal("a push after the end was queued")
	}
}

// An end with drain still delivers what was queued (SessionExpired last).
func TestOutboxDrainsOnExpiry(t *testing.T) {
	ob := newOutbox(1, 10)
	ob.push(&dlmpb.SessionResponse{}, &dlmpb.SessionResponse{})
	ob.end(true, nil)
	msgs, ended, err := ob.take(nil)
	if len(msgs) != 2 || !ended || err != nil {
		t.Fatalf("take = %d, %v, %v; want 2 queued messages and a clean end", len(msgs), ended, err)
	}
}
