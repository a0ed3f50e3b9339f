package raftnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// A new data directory gets raft-wal unless bolt is asked for; one that
// holds a log keeps its store; asking for the other store, or an unknown
// one, or a directory holding both, is refused with the reason.
func TestLogStoreChoice(t *testing.T) {
	holding := func(t *testing.T, entries ...string) string {
		dir := t.TempDir()
		for _, e := range entries {
			if e == "wal" {
				if err := os.Mkdir(filepath.Join(dir, e), 0o750); err != nil {
					t.Fatal(err)
				}
			} else if err := os.WriteFile(filepath.Join(dir, e), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}
	for _, c := range []struct {
		name   string
		holds  []string
		asked  string
		want   string
		refuse bool
	}{
		{"new, default", nil, "", LogStoreWAL, false},
		{"new, bolt asked", nil, LogStoreBolt, LogStoreBolt, false},
		{"bolt dir", []string{"raft.db"}, "", LogStoreBolt, false},
		{"wal dir", []string{"wal"}, "", LogStoreWAL, false},
		{"bolt dir, wal asked", []string{"raft.db"}, LogStoreWAL, "", true},
		{"wal dir, bolt asked", []string{"wal"}, LogStoreBolt, "", true},
		{"both", []string{"wal", "raft.db"}, "", "", true},
		{"unknown", nil, "rocks", "", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := logStoreOf(holding(t, c.holds...), c.asked)
			switch {
			case c.refuse && !errors.Is(err, ErrLogStore):
				t.Fatalf("got %q, %v; want ErrLogStore", got, err)
			case !c.refuse && (err != nil || got != c.want):
				t.Fatalf("got %q, %v; want %q", got, err, c.want)
			}
		})
	}
}

// A deposed leader's uncommitted tail is truncated by Raft and replaced by
// the new leader's entries; the log must reopen after that with the new
// entries (raft-wal v0.4.0 could not: hashicorp/raft-wal#31). Both stores,
// through the node's own opening.
func TestLogReopensAfterTailTruncation(t *testing.T) {
	for _, store := range []string{LogStoreWAL, LogStoreBolt} {
		t.Run(store, func(t *testing.T) {
			dir := t.TempDir()
			entries := func(term, from, to uint64) []*raft.Log {
				var out []*raft.Log
				for i := from; i <= to; i++ {
					out = append(out, &raft.Log{Index: i, Term: term, Type: raft.LogCommand, Data: fmt.Appendf(nil, "t%d-%d", term, i)})
				}
				return out
			}
			open := func() (*Node, raft.LogStore) {
				n := &Node{cfg: Config{Dir: dir}}
				logs, _, err := n.openLog(store, hclog.NewNullLogger())
				if err != nil {
					t.Fatal(err)
				}
				return n, logs
			}
			closeAll := func(n *Node) {
				for i := len(n.closers) - 1; i >= 0; i-- {
					if err := n.closers[i].Close(); err != nil {
						t.Fatal(err)
					}
				}
			}
			n, logs := open()
			if err := logs.StoreLogs(entries(1, 1, 10)); err != nil {
				t.Fatal(err)
			}
			if err := logs.DeleteRange(8, 10); err != nil {
				t.Fatal(err)
			}
			if err := logs.StoreLogs(entries(2, 8, 12)); err != nil {
				t.Fatal(err)
			}
			closeAll(n)

			n, logs = open()
			defer closeAll(n)
			first, _ := logs.FirstIndex()
			last, _ := logs.LastIndex()
			if first != 1 || last != 12 {
				t.Fatalf("reopened log holds %d..%d, want 1..12", first, last)
			}
			for i := uint64(1); i <= 12; i++ {
				var l raft.Log
				if err := logs.GetLog(i, &l); err != nil {
					t.Fatalf("entry %d: %v", i, err)
				}
				term := uint64(1)
				if i >= 8 {
					term = 2
				}
				if l.Term != term || string(l.Data) != fmt.Sprintf("t%d-%d", term, i) {
					t.Fatalf("entry %d: term %d %q, want term %d", i, l.Term, l.Data, term)
				}
			}
		})
	}
}
