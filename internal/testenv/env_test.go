package testenv_test

import (
	"net"
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
