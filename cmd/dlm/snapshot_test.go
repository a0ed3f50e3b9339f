package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/testenv"
)

// takeGrants acquires and releases n locks on the server at addr and
// returns the highest fencing token granted.
func takeGrants(t *testing.T, addr string, n int) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	store, err := dlmserver.Dial(ctx, addr, dlmserver.WithLabel(t.Name()))
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close(context.Background())
	c := dlm.New(store)
	var highest uint64
	for i := range n {
		l, err := c.Acquire(ctx, "restore/"+string(rune('a'+i)))
		if err != nil {
			t.Fatal(err)
		}
		highest = max(highest, l.Token())
		if err := l.Release(ctx); err != nil {
			t.Fatal(err)
		}
	}
	return highest
}

// TestRestoreNeverRewindsTokens: an online snapshot and a copy of the
// stopped data dir are taken early; the node goes on granting; each old
// copy, restored, starts its tokens above every token granted before it
// (the automatic margin), and -token-floor lifts them above the floor.
func TestRestoreNeverRewindsTokens(t *testing.T) {
	bin := dlmBin(t)
	dir := filepath.Join(t.TempDir(), "data")
	srv := testenv.StartDLM(t, bin, "-data", dir)
	early := takeGrants(t, srv.Addr(), 3)

	snapFile := filepath.Join(t.TempDir(), "early.snap")
	code, out, stderr := runDLM(t, nil, "snapshot", "save", snapFile, "--http", srv.HTTPAddr())
	if code != 0 || !strings.Contains(out, "saved the state as of entry") {
		t.Fatalf("dlm snapshot save: exit %d %q\n%s", code, out, stderr)
	}
	srv.Stop()
	copied := filepath.Join(t.TempDir(), "copy")
	if err := os.CopyFS(copied, os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	highest := takeGrants(t, srv.Addr(), 5)
	if highest <= early {
		t.Fatalf("tokens went from %d to %d", early, highest)
	}
	srv.Stop()

	restored := filepath.Join(t.TempDir(), "restored")
	code, out, stderr = runDLM(t, nil, "snapshot", "restore", snapFile, "--data", restored)
	if code != 0 {
		t.Fatalf("dlm snapshot restore: exit %d %q\n%s", code, out, stderr)
	}
	r := testenv.StartDLM(t, bin, "-data", restored)
	if tok := takeGrants(t, r.Addr(), 1); tok <= highest {
		t.Errorf("restored from the online snapshot: token %d, not above %d granted before", tok, highest)
	}
	r.Stop()
	if code, _, stderr := runDLM(t, nil, "snapshot", "restore", snapFile, "--data", restored); code != exitUsage || !strings.Contains(stderr, "not fresh") {
		t.Errorf("restore into a used data dir: exit %d\n%s", code, stderr)
	}

	c := testenv.StartDLM(t, bin, "-data", copied)
	if tok := takeGrants(t, c.Addr(), 1); tok <= highest {
		t.Errorf("started from the copied data dir: token %d, not above %d granted before", tok, highest)
	}
	c.Stop()

	const floor = 1_000_000_000_000_000
	f := testenv.StartDLM(t, bin, "-data", copied, "-token-floor", "1000000000000000")
	if tok := takeGrants(t, f.Addr(), 1); tok <= floor {
		t.Errorf("with -token-floor %d: token %d", uint64(floor), tok)
	}
}
