package fsm

import (
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/internal/cmdtest"
)

// The commands the tests apply (see package cmdtest).
var (
	openCmd       = cmdtest.Open
	lockCmd       = cmdtest.Lock
	convertCmd    = cmdtest.Convert
	releaseCmd    = cmdtest.Release
	expireCmd     = cmdtest.Expire
	semCmd        = cmdtest.Semaphore
	cancelCmd     = cmdtest.Cancel
	withWait      = cmdtest.WithWait
	withMetadata  = cmdtest.WithMetadata
	snapshotBytes = cmdtest.SnapshotBytes
	memberCmd     = cmdtest.Member
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
