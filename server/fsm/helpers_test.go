package fsm

import (
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/internal/servertest"
)

// The commands the tests apply (see package cmdtest).
var (
	openCmd       = servertest.Open
	lockCmd       = servertest.Lock
	convertCmd    = servertest.Convert
	releaseCmd    = servertest.Release
	expireCmd     = servertest.Expire
	semCmd        = servertest.Semaphore
	cancelCmd     = servertest.Cancel
	relabelCmd    = servertest.Relabel
	withWait      = servertest.WithWait
	withMetadata  = servertest.WithMetadata
	snapshotBytes = servertest.SnapshotBytes
	memberCmd     = servertest.Member
	checkpointCmd = servertest.Checkpoint
	raiseCmd      = servertest.RaiseTokens
)

// applyEntry applies one log entry of cmds at index with the given stamp.
func applyEntry(t testing.TB, f *FSM, index uint64, stamp int64, cmds ...*dlmpb.Command) []Result {
	t.Helper()
	data, err := proto.Marshal(&dlmpb.Batch{Commands: cmds, StampUnixNano: stamp})
	if err != nil {
		t.Fatal(err)
	}
	resp := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data})
	rs, ok := resp.([]Result)
	if !ok {
		t.Fatalf("Apply(%d) = %v, want []Result", index, resp)
	}
	return rs
}

func mustOK(t testing.TB, rs ...Result) {
	t.Helper()
	for i, r := range rs {
		if r.Err != nil {
			t.Fatalf("result %d: %v", i, r.Err)
		}
	}
}
