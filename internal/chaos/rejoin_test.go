package chaos

import (
	"context"
	"testing"
	"time"
)

// A killed node catches up after its restart: two followers and a leader
// killed in turn, each kept down while the cluster takes writes. The bound
// is a sanity check only (the figures are logged; dlm-chaos -rejoin 20
// measures them): before the server kept its replication to a dead peer
// from backing off, a restarted node could wait up to 10s for the leader.
func TestRejoinCatchesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	bin, _ := binaries(t)
	rs, err := MeasureRejoin(ctx, RejoinConfig{Bin: bin, Dir: runDir(t), Cycles: 3, LeaderEvery: 3,
		Down: time.Second, MaxDown: 2 * time.Second, Timeout: 20 * time.Second, Log: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s", RejoinSummary(rs))
	const bound = 8 * time.Second
	for i, r := range rs {
		if r.Behind == 0 {
			t.Errorf("cycle %d: %s missed no entry while down", i+1, r.Node)
		}
		if r.CatchUp > bound {
			t.Errorf("cycle %d: %s caught up %s after its restart (bound %s)", i+1, r.Node, r.CatchUp, bound)
		}
	}
	if !rs[len(rs)-1].Leader {
		t.Errorf("the last cycle did not kill the leader")
	}
}
