package testenv_test

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/testenv"
)

func dial(t *testing.T, addr string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
	}
	return err
}

func TestPostgresStartsKillsRestarts(t *testing.T) {
	p := testenv.StartPostgres(t)
	if err := dial(t, p.Addr()); err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if err := dial(t, p.Addr()); err == nil {
		t.Fatal("still listening after Kill")
	}
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := dial(t, p.Addr()); err != nil {
		t.Fatal(err)
	}
}

func TestEtcdStarts(t *testing.T) {
	e := testenv.StartEtcd(t)
	if err := dial(t, e.Endpoint()[len("http://"):]); err != nil {
		t.Fatal(err)
	}
}

// fakeServer writes a script that stands in for dlm: each run counts
// itself in a file, and the first fail runs exit with what a server that
// lost its port writes (or, with other set, another failure), the others
// say they started and wait to be killed. It returns the script and the
// count file.
func fakeServer(t *testing.T, fail int, other bool) (bin, count string) {
	dir := t.TempDir()
	bin, count = filepath.Join(dir, "dlm"), filepath.Join(dir, "runs")
	msg := "dlm server: listen: listen tcp 127.0.0.1:1: bind: address already in use"
	if other {
		msg = "dlm server: bad flag"
	}
	script := fmt.Sprintf(`#!/bin/sh
n=$(cat %[1]q 2>/dev/null || echo 0); n=$((n+1)); echo $n > %[1]q
if [ $n -le %[2]d ]; then echo %[3]q >&2; exit 1; fi
echo "dlm server: started"
exec sleep 60
`, count, fail, msg)
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, count
}

func runs(t *testing.T, count string) string {
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestClusterRetriesALostPort(t *testing.T) {
	bin, count := fakeServer(t, 2, false)
	c, err := testenv.NewCluster(bin, 1)
	if err != nil {
		t.Fatalf("two lost ports, then a start: %v", err)
	}
	c.Stop()
	if n := runs(t, count); n != "3" {
		t.Fatalf("%s runs, want 3: two that lost their port, one that started", n)
	}

	bin, count = fakeServer(t, 1, true)
	if c, err := testenv.NewCluster(bin, 1); err == nil || !strings.Contains(err.Error(), "bad flag") {
		if c != nil {
			c.Stop()
		}
		t.Fatalf("another failure: %v, want it at once", err)
	}
	if n := runs(t, count); n != "1" {
		t.Fatalf("%s runs after another failure, want 1", n)
	}
}
