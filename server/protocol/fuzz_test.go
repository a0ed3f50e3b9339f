package protocol

// The fuzz target for client requests on their way to commands. `go test`
// runs its seed corpus; scripts/fuzz.sh fuzzes it for a while.

import (
	"bytes"
	"io"
	"testing"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/internal/servertest"
)

// FuzzRequestCommand turns arbitrary client requests into commands of
// session 1 of a busy FSM and applies them. A request is refused (with its
// id, in the stream's session) or becomes a command of the stream's session
// that encodes; applied, it is answered, and a refusal carries a reason.
func FuzzRequestCommand(f *testing.F) {
	for _, m := range servertest.SessionRequests() {
		data, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add(protowire.AppendTag(nil, 99, protowire.VarintType)) // an unknown request
	const sid = locktable.SessionID(1)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m dlmpb.SessionRequest
		if proto.Unmarshal(data, &m) != nil || m.GetOpen() != nil || m.GetKeepAlive() != nil {
			return // not decoded by gRPC, or handled before RequestCommand
		}
		cmd, id, err := RequestCommand(sid, &m)
		if err != nil {
			if cmd != nil || id == nil || id.GetSession() != uint64(sid) {
				t.Fatalf("refused request: command %v, id %v", cmd, id)
			}
			return
		}
		if m.GetClose() == nil && (id == nil || id.GetSession() != uint64(sid) || cmd.GetSeq() != id.GetSeq()) {
			t.Fatalf("command %v: request id %v, want session %d and the command's seq", cmd, id, sid)
		}
		f := populatedFSM(t)
		r := applyBatch(t, f, uint64(len(servertest.Populate())+1), &dlmpb.Batch{Commands: []*dlmpb.Command{cmd}})[0]
		if r.Err != nil && ReasonOf(r.Err) == dlmpb.Reason_REASON_UNSPECIFIED {
			t.Fatalf("refusal %v has no reason code", r.Err)
		}
		if to, reply, _ := Answer(cmd, &r); m.GetClose() == nil && (reply == nil || to != sid) {
			t.Fatalf("no answer to session %d for %v (%+v)", sid, cmd, r)
		} else if m.GetClose() == nil && !proto.Equal(servertest.AnswerID(reply), id) {
			t.Fatalf("answer %v to request %v: its id is not the request's", reply, id)
		}
		// The state machine's own invariants are checked by its fuzz
		// targets (package fsm); here: it still snapshots and restores.
		snap := servertest.SnapshotBytes(t, f)
		if err := fsm.NewFSM(locktable.Limits{}).Restore(io.NopCloser(bytes.NewReader(snap))); err != nil {
			t.Fatalf("after %v the snapshot does not restore: %v", cmd, err)
		}
	})
}

// populatedFSM returns a state machine holding one of everything the log
// can create (servertest.Populate).
func populatedFSM(t *testing.T) *fsm.FSM {
	f := fsm.NewFSM(locktable.Limits{})
	for i, b := range servertest.Populate() {
		for _, r := range applyBatch(t, f, uint64(i+1), b) {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	return f
}

// applyBatch applies b to f as the Raft log entry at index.
func applyBatch(t *testing.T, f *fsm.FSM, index uint64, b *dlmpb.Batch) []fsm.Result {
	t.Helper()
	data, err := proto.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	rs, ok := f.Apply(&raft.Log{Index: index, Type: raft.LogCommand, Data: data}).([]fsm.Result)
	if !ok {
		t.Fatalf("entry %d was not applied", index)
	}
	return rs
}
