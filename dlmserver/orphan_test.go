package dlmserver

import (
	"log/slog"
	"testing"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// A lock the session state lists but the store does not know is one it
// released with an answer given before the release was committed, the
// release then lost with the leader: the store releases it again, and
// leaves alone the locks it holds and those its requests name.
func TestReconcileReleasesOrphans(t *testing.T) {
	s := &Store{log: slog.New(slog.DiscardHandler)}
	s.st.init()
	s.st.sid = 4
	held := &lockState{id: 10, granted: true, lost: make(chan struct{})}
	s.st.locks[10] = held
	pending := &lockState{id: 11, granted: true, lost: make(chan struct{})}
	s.sendLocked(callRelease, pending, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
		return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Release{Release: &dlmpb.ReleaseRequest{Id: s.reqID(seq), LockId: 11}}}
	})
	granted := dlmpb.LockInfo_STATE_GRANTED
	s.reconcileLocked(&dlmpb.SessionSync{Session: 4, Locks: []*dlmpb.LockInfo{
		{LockId: 10, Resource: "held", State: granted},
		{LockId: 11, Resource: "being-released", State: granted},
		{LockId: 12, Resource: "orphan", State: granted},
	}})
	var released []uint64
	for _, c := range s.st.calls {
		if c.kind == callRelease {
			released = append(released, c.msg.GetRelease().GetLockId())
		}
	}
	if len(released) != 2 || !(released[0] == 12 || released[1] == 12) || !(released[0] == 11 || released[1] == 11) {
		t.Fatalf("releases pending after the sync: locks %v, want 11 (already asked) and 12 (the orphan)", released)
	}
	if held.gone || s.st.locks[10] != held {
		t.Fatal("the held lock was touched")
	}
	if s.st.locks[12] != nil {
		t.Fatal("the orphan became a lock of the store")
	}
	// Its answer settles the call and touches no lease.
	for seq, c := range s.st.calls {
		if c.msg.GetRelease().GetLockId() == 12 {
			s.dispatchLocked(nil, &dlmpb.SessionResponse{Msg: &dlmpb.SessionResponse_Released{Released: &dlmpb.Released{
				Id: s.reqID(seq), LockId: 12, Token: 3}}})
			if s.st.calls[seq] != nil || len(c.done) != 1 {
				t.Fatal("the orphan's release was not settled by its answer")
			}
		}
	}
}
