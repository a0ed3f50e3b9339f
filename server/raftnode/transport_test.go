package raftnode

import (
	"net"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// Outgoing Raft connections leave from the source IP asked for, and the
// transport advertises the address asked for.
func TestTransportSourceAndAdvertise(t *testing.T) {
	peer, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	layer, err := newStreamLayer("127.0.0.1:0", "127.0.0.9:7000", "127.0.0.7", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	if got := layer.Addr().String(); got != "127.0.0.9:7000" {
		t.Fatalf("advertised %s", got)
	}
	accepted := make(chan net.Addr, 1)
	go func() {
		c, err := peer.Accept()
		if err != nil {
			accepted <- nil
			return
		}
		accepted <- c.RemoteAddr()
		c.Close()
	}()
	c, err := layer.Dial(raft.ServerAddress(peer.Addr().String()), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if a, ok := (<-accepted).(*net.TCPAddr); !ok || !a.IP.Equal(net.ParseIP("127.0.0.7")) {
		t.Fatalf("the peer saw the connection come from %v", a)
	}
	for _, bad := range []struct{ bind, adv, src string }{
		{"127.0.0.1:0", "not an address", ""},
		{"127.0.0.1:0", "", "not-an-ip"},
		{"0.0.0.0:0", "", ""},
	} {
		if tr, _, err := newTransport(bad.bind, bad.adv, bad.src, nil, hclog.NewNullLogger()); err == nil {
			tr.Close()
			t.Errorf("newTransport(%q, %q, %q) was accepted", bad.bind, bad.adv, bad.src)
		}
	}
}
