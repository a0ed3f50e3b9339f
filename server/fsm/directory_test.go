package fsm

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// Member addresses are replicated, updated, kept through a snapshot, and
// malformed ones are refused.
func TestMemberAddresses(t *testing.T) {
	f := NewFSM(locktable.Limits{})
	mustOK(t, applyEntry(t, f, 1, sec, memberCmd("node-2", "10.0.0.2:7420", "10.0.0.2:7421"), memberCmd("node-1", "10.0.0.1:7420", ""))...)
	mustOK(t, applyEntry(t, f, 2, sec, memberCmd("node-2", "10.0.0.9:7420", "10.0.0.9:7421"))...)
	for _, bad := range []*dlmpb.Command{memberCmd("", "h:1", ""), memberCmd("n", "no-port", ""), memberCmd("n", "h:1", "bad http")} {
		if r := applyEntry(t, f, 3, sec, bad); !errors.Is(r[0].Err, ErrInvalidCommand) {
			t.Errorf("%v applied: %v", bad, r[0].Err)
		}
	}
	g := NewFSM(locktable.Limits{})
	if err := g.Restore(io.NopCloser(bytes.NewReader(snapshotBytes(t, f)))); err != nil {
		t.Fatal(err)
	}
	for _, h := range []*FSM{f, g} {
		if c, ht, ok := h.MemberAddrs("node-2"); !ok || c != "10.0.0.9:7420" || ht != "10.0.0.9:7421" {
			t.Errorf("node-2: %q %q %v", c, ht, ok)
		}
		if c, ht, ok := h.MemberAddrs("node-1"); !ok || c != "10.0.0.1:7420" || ht != "" {
			t.Errorf("node-1: %q %q %v", c, ht, ok)
		}
		if _, _, ok := h.MemberAddrs("node-3"); ok {
			t.Error("an unknown member has addresses")
		}
	}
	// A snapshot whose member records are out of order is malformed.
	var snap dlmpb.FSMSnapshot
	if err := proto.Unmarshal(snapshotBytes(t, f), &snap); err != nil {
		t.Fatal(err)
	}
	snap.Members[0], snap.Members[1] = snap.Members[1], snap.Members[0]
	data, err := proto.Marshal(&snap)
	if err != nil {
		t.Fatal(err)
	}
	if err := NewFSM(locktable.Limits{}).Restore(io.NopCloser(bytes.NewReader(data))); !errors.Is(err, ErrMalformedSnapshot) {
		t.Fatalf("restore of unordered members: %v", err)
	}
}
