package server

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/protocol"
)

// relabel sends a relabel of lock with metadata and returns its seq.
func (r *rawSession) relabel(lock uint64, metadata []byte) uint64 {
	r.seq++
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Relabel{Relabel: &dlmpb.RelabelRequest{
		Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: lock, Metadata: metadata}}})
	return r.seq
}

// listedMetadata returns the metadata of the holders of resource name.
func listedMetadata(t *testing.T, c dlmpb.DLMClient, name string) []string {
	t.Helper()
	resp, err := c.List(context.Background(), &dlmpb.ListRequest{Prefix: name, Exact: true})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ri := range resp.GetResources() {
		for _, h := range ri.GetHolders() {
			out = append(out, h.GetMetadata())
		}
	}
	return out
}

// A relabel on the stream is answered Relabeled, after which listings
// show the new metadata; too long metadata is refused as at acquire; a
// lock that is gone, or another session's, is refused.
func TestStreamRelabel(t *testing.T) {
	s := startServer(t, Config{})
	c := dialPB(t, s.Addr())
	r, _ := open(t, s, 0, 10*time.Second)
	lock := r.granted(r.lock("x", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = []byte("v1") })).GetLockId()

	seq := r.relabel(lock, []byte("v2"))
	m := r.recvSkipAcks().GetRelabeled()
	if m == nil || m.GetId().GetSeq() != seq || m.GetLockId() != lock {
		t.Fatalf("want Relabeled for request %d of lock %d, got %v", seq, lock, m)
	}
	if got := listedMetadata(t, c, "x"); len(got) != 1 || got[0] != "v2" {
		t.Fatalf("listed metadata %q, want v2", got)
	}

	long := r.relabel(lock, []byte(strings.Repeat("m", protocol.MaxMetadataBytes+1)))
	if msg := r.refusal(long, dlmpb.Reason_REASON_INVALID).GetMessage(); !strings.Contains(msg, "metadata is 1025 bytes, the limit is 1024") {
		t.Fatalf("refusal of long metadata: %q", msg)
	}
	longLock := r.lock("y", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) {
		l.Metadata = []byte(strings.Repeat("m", protocol.MaxMetadataBytes+1))
	})
	if msg := r.refusal(longLock, dlmpb.Reason_REASON_INVALID).GetMessage(); !strings.Contains(msg, "metadata is 1025 bytes, the limit is 1024") {
		t.Fatalf("refusal of long metadata at acquire: %q", msg)
	}

	other, _ := open(t, s, 0, 10*time.Second)
	other.refusal(other.relabel(lock, []byte("stolen")), dlmpb.Reason_REASON_NOT_OWNER)

	r.release(lock)
	if rel := r.recvSkipAcks().GetReleased(); rel == nil {
		t.Fatal("no Released")
	}
	r.refusal(r.relabel(lock, []byte("late")), dlmpb.Reason_REASON_UNKNOWN_LOCK)
	if got := listedMetadata(t, c, "x"); len(got) != 0 {
		t.Fatalf("listed after the release: %q", got)
	}
}
