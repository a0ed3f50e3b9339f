package dlmserver

import (
	"log/slog"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// The acquisitions of a group share one owner id, which the store forgets
// with the group's last acquisition; without a group each has its own.
func TestGroupOwner(t *testing.T) {
	var st state
	st.init()
	a := newLockState(st.ownerFor("g"), driver.Request{Owner: "a", Group: "g"})
	b := newLockState(st.ownerFor("g"), driver.Request{Owner: "b", Group: "g"})
	c := newLockState(st.ownerFor(""), driver.Request{Owner: "c"})
	if a.owner != b.owner || c.owner == a.owner {
		t.Fatalf("owners %d, %d (group g) and %d (no group)", a.owner, b.owner, c.owner)
	}
	st.forget(a)
	st.forget(a) // twice: counted once
	if st.groups["g"] == nil {
		t.Fatal("the group was forgotten while b is left")
	}
	st.lose(b)
	if len(st.groups) != 0 {
		t.Fatalf("groups left: %v", st.groups)
	}
	if d := newLockState(st.ownerFor("g"), driver.Request{Owner: "d", Group: "g"}); d.owner == a.owner {
		t.Fatal("the forgotten group's owner id was used again")
	}
}

// After a reconnect, a lock request whose answer was lost is matched to
// its lock in the session state by owner and resource, unless that is
// ambiguous (two requests of one group on one resource): those go again
// with their sequence numbers, and the locks are released as orphans.
func TestReconcileGroupRequests(t *testing.T) {
	s := &Store{log: slog.New(slog.DiscardHandler)}
	s.st.init()
	s.st.sid = 4
	lock := func(req driver.Request) *lockState {
		ls := newLockState(s.st.ownerFor(req.Group), req)
		s.sendLocked(callLock, ls, 0, 0, func(seq uint64) *dlmpb.SessionRequest {
			return &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
				Id: s.reqID(seq), Resource: req.Resource, Owner: ls.owner, Mode: dlmpb.Mode_MODE_PR}}}
		})
		return ls
	}
	x := lock(driver.Request{Resource: "x", Owner: "a", Group: "g"})
	y1 := lock(driver.Request{Resource: "y", Owner: "b", Group: "g"})
	y2 := lock(driver.Request{Resource: "y", Owner: "c", Group: "g"})
	granted := dlmpb.LockInfo_STATE_GRANTED
	s.reconcileLocked(&dlmpb.SessionSync{Session: 4, Locks: []*dlmpb.LockInfo{
		{LockId: 10, Owner: x.owner, Resource: "x", State: granted, Token: proto.Uint64(7)},
		{LockId: 11, Owner: y1.owner, Resource: "y", State: granted, Token: proto.Uint64(8)},
		{LockId: 12, Owner: y1.owner, Resource: "y", State: granted, Token: proto.Uint64(9)},
	}})
	if x.id != 10 || !x.granted || x.token != 7 {
		t.Fatalf("x: id %d granted %v token %d, want lock 10 granted with token 7", x.id, x.granted, x.token)
	}
	if y1.id != 0 || y2.id != 0 {
		t.Fatalf("ambiguous requests named locks %d and %d", y1.id, y2.id)
	}
	var locks, released []uint64
	for _, c := range s.st.calls {
		switch c.kind {
		case callLock:
			locks = append(locks, c.seq)
		case callRelease:
			released = append(released, c.msg.GetRelease().GetLockId())
		}
	}
	if len(locks) != 2 {
		t.Fatalf("lock requests pending: %v, want the two on y", locks)
	}
	if len(released) != 2 {
		t.Fatalf("releases pending: %v, want 11 and 12", released)
	}
}
