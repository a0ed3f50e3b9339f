package main

import (
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

// A node joins a running cluster with -join, dlm cluster members shows it,
// dlm cluster remove takes it out, and locks keep working through it all.
func TestClusterMembership(t *testing.T) {
	bin := dlmBin(t)
	// Raft timeouts of 500ms, not testenv's quick 100ms: this test is not
	// about elections, and a loaded machine that holds a node back for a
	// moment would hold one, during which a removal fails.
	raft := []string{"-raft-timeout", "500ms"}
	c := testenv.StartCluster(t, bin, 3, raft...)
	c.Join(t, bin, raft...)
	http := c.Nodes[0].HTTPAddr() + "," + c.Nodes[1].HTTPAddr()

	// A loaded machine may still see an election meanwhile, and a listing
	// without a leader: ask until one shows.
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, out, stderr := runDLM(t, nil, "cluster", "members", "--http", http)
		if code == 0 && strings.Count(out, "voter") == 4 && strings.Contains(out, "node-4") && strings.Count(out, "leader") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("members after the join: exit %d\n%s%s", code, out, stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	store := storeFlag(c.Addrs())
	if code, out, stderr := runDLM(t, nil, "run", store, "--lock", "members", "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("dlm run on the cluster: exit %d %q\n%s", code, out, stderr)
	}

	if code, out, stderr := runDLM(t, nil, "cluster", "remove", "--http", http, "node-4"); code != 0 || !strings.Contains(out, "removed node-4") {
		t.Fatalf("remove: exit %d\n%s%s", code, out, stderr)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		_, out, _ := runDLM(t, nil, "cluster", "members", "--http", http)
		if !strings.Contains(out, "node-4") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-4 still listed after its removal:\n%s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _, stderr := runDLM(t, nil, "cluster", "remove", "--http", http); code != exitUsage {
		t.Fatalf("remove without an id: exit %d\n%s", code, stderr)
	}
	if code, _, _ := runDLM(t, nil, "cluster", "bogus"); code != exitUsage {
		t.Fatalf("unknown cluster command: exit %d", code)
	}
}
