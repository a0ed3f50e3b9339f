package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"
)

// echo serves lines back on a free port until the test ends.
func echo(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

// dialFrom connects to addr from the loopback IP src and checks that a
// line comes back.
func dialFrom(src, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	if err := roundTrip(c); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func roundTrip(c net.Conn) error {
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "ping\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "ping\n" {
		return errors.New("echo: " + line)
	}
	return nil
}

// A cut pair's open connections are closed and new ones refused, in both
// directions; other participants are not affected; mending restores it.
func TestNetCutsPairs(t *testing.T) {
	n := NewNet()
	defer n.Close()
	n.Name("127.0.0.11", "node-1")
	n.Name("127.0.0.12", "node-2")
	n.Name("127.0.0.21", "client-1")
	p2, err := n.NewProxy("node-2", echo(t)) // in front of node-2
	if err != nil {
		t.Fatal(err)
	}
	c1, err := dialFrom("127.0.0.11", p2.Addr())
	if err != nil {
		t.Fatalf("node-1 to node-2: %v", err)
	}
	defer c1.Close()
	cc, err := dialFrom("127.0.0.21", p2.Addr())
	if err != nil {
		t.Fatalf("client-1 to node-2: %v", err)
	}
	defer cc.Close()

	n.Cut("node-2", "node-1") // either order names the pair
	if err := roundTrip(c1); err == nil {
		t.Fatal("node-1's open connection to node-2 survived the cut")
	}
	if _, err := dialFrom("127.0.0.11", p2.Addr()); err == nil {
		t.Fatal("node-1 connected to node-2 through the cut")
	}
	if err := roundTrip(cc); err != nil {
		t.Fatalf("client-1's connection was cut too: %v", err)
	}
	n.Mend("node-1", "node-2")
	c3, err := dialFrom("127.0.0.11", p2.Addr())
	if err != nil {
		t.Fatalf("node-1 to node-2 after mending: %v", err)
	}
	c3.Close()
}

// The fenced store accepts a token at least as high as the greatest it has
// seen for the resource, rejects a lower one, and records both.
func TestFencedStore(t *testing.T) {
	h := history.NewHistory(nil)
	f, err := StartFenced(h)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fc := newFencedClient(f.URL())
	ctx := context.Background()
	for _, step := range []struct {
		res   string
		token uint64
		want  error
	}{
		{"r", 5, nil}, {"r", 5, nil}, {"r", 7, nil}, {"r", 6, ErrFenced}, {"s", 1, nil},
	} {
		err := fc.write(ctx, Write{Resource: step.res, Token: step.token, Client: "c", Lease: step.token, Phase: "begin", Start: history.Now()})
		if !errors.Is(err, step.want) || (err != nil && step.want == nil) {
			t.Fatalf("write %s token %d: %v, want %v", step.res, step.token, err, step.want)
		}
	}
	var kinds []string
	for _, e := range h.Events() {
		kinds = append(kinds, string(e.Kind))
	}
	want := "write-accepted write-accepted write-accepted write-rejected write-accepted"
	if got := strings.Join(kinds, " "); got != want {
		t.Fatalf("recorded %s, want %s", got, want)
	}
	b, _ := json.Marshal(h.Events()[3])
	if !strings.Contains(string(b), `"token":6`) {
		t.Fatalf("rejection recorded as %s", b)
	}
}
