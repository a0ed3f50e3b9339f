package protocol

import (
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/locktable"
)

// Metadata is any bytes on the way in (LockRequest.metadata) and text on
// the way out (LockInfo.metadata, a string): UTF-8 passes as given, other
// bytes become U+FFFD, so that the listing still encodes (proto3 refuses
// to encode a string that is not UTF-8).
func TestLockInfoMetadataIsText(t *testing.T) {
	for given, want := range map[string]string{
		"worker <3> ünï": "worker <3> ünï",
		"a\xffb\xc3":     "a\uFFFDb\uFFFD",
		"":               "",
	} {
		l := LockInfo(locktable.LockInfo{ID: 1, State: locktable.LockGranted, Mode: driver.EX},
			Source{Metadata: func(locktable.LockID) []byte { return []byte(given) }})
		if l.GetMetadata() != want {
			t.Fatalf("metadata %q shown as %q, want %q", given, l.GetMetadata(), want)
		}
		if _, err := proto.Marshal(l); err != nil {
			t.Fatalf("metadata %q: %v", given, err)
		}
	}
}

// LockInfo.metadata was bytes: what an older server sent, UTF-8, reads
// the same as a string, and what this one sends reads the same as bytes.
func TestLockInfoMetadataWireCompatible(t *testing.T) {
	const meta = "holder ü"
	old := protowire.AppendTag(nil, 14, protowire.BytesType)
	old = protowire.AppendBytes(old, []byte(meta))
	var l dlmpb.LockInfo
	if err := proto.Unmarshal(old, &l); err != nil || l.GetMetadata() != meta {
		t.Fatalf("bytes field read as %q, %v", l.GetMetadata(), err)
	}
	b, err := proto.Marshal(&dlmpb.LockInfo{Metadata: meta})
	if err != nil {
		t.Fatal(err)
	}
	num, typ, n := protowire.ConsumeTag(b)
	v, _ := protowire.ConsumeBytes(b[n:])
	if num != 14 || typ != protowire.BytesType || string(v) != meta {
		t.Fatalf("written as field %d type %d %q", num, typ, v)
	}
}

// What does not apply is unset: a waiter's mode, token and grant time; a
// semaphore holder's modes; a lock's permits.
func TestLockInfoLeavesOutWhatDoesNotApply(t *testing.T) {
	w := LockInfo(locktable.LockInfo{State: locktable.LockWaiting, Requested: driver.PR, QueuedAt: 5}, Source{})
	if w.Mode != nil || w.Token != nil || w.GrantedAt != nil || w.Deadline != nil || w.Permits != nil ||
		w.GetRequested() != dlmpb.Mode_MODE_PR || w.GetQueuedAt().AsTime().UnixNano() != 5 {
		t.Fatalf("waiter: %v", w)
	}
	s := LockInfo(locktable.LockInfo{Kind: locktable.KindSemaphore, State: locktable.LockGranted, Permits: 2, Token: 7, GrantedAt: 9}, Source{})
	if s.Mode != nil || s.Requested != nil || s.QueuedAt != nil || s.GetPermits() != 2 || s.Token == nil || s.GetToken() != 7 ||
		s.GetGrantedAt().AsTime().UnixNano() != 9 {
		t.Fatalf("semaphore holder: %v", s)
	}
	c := LockInfo(locktable.LockInfo{State: locktable.LockConverting, Mode: driver.PR, Requested: driver.EX, Token: 3, GrantedAt: 1, QueuedAt: 2, Deadline: 4}, Source{})
	if c.GetMode() != dlmpb.Mode_MODE_PR || c.GetRequested() != dlmpb.Mode_MODE_EX || c.Token == nil || c.GrantedAt == nil || c.QueuedAt == nil || c.Deadline == nil || c.Permits != nil {
		t.Fatalf("converting lock: %v", c)
	}
}
