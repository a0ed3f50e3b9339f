package raftnode

import (
	"crypto/tls"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/dlmhq/dlm/internal/devcert"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/internal/servertest"
)

// The Raft stream layer over TLS accepts a node certificate of its CA and
// refuses a client certificate of the same CA and a node certificate of
// another.
func TestRaftTLSStreamLayer(t *testing.T) {
	pki, other := servertest.NewPKI(t, "alice"), servertest.NewPKI(t)
	layer, err := newStreamLayer("127.0.0.1:0", "", "", pki.RaftTLS(t, "node-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer layer.Close()
	go func() {
		for {
			c, err := layer.Accept()
			if err != nil {
				return
			}
			go func() {
				c.SetDeadline(time.Now().Add(5 * time.Second))
				c.Read(make([]byte, 1)) // runs the handshake
				c.Write([]byte{1})
				c.Close()
			}()
		}
	}()
	addr := layer.Listener.Addr().String()
	try := func(c *tls.Config) error {
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", addr, c)
		if err != nil {
			return err
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write([]byte{0}); err != nil {
			return err
		}
		_, err = conn.Read(make([]byte, 1))
		return err
	}
	if err := try(pki.RaftTLS(t, "node-2")); err != nil {
		t.Fatalf("a node of the CA: %v", err)
	}
	client := pki.ClientTLS(t, "alice")
	client.InsecureSkipVerify = true //nolint:gosec // the test is about the server's check
	if err := try(client); err == nil {
		t.Fatal("a client certificate of the CA was accepted for Raft")
	}
	if err := try(other.RaftTLS(t, "node-2")); err == nil {
		t.Fatal("a node certificate of another CA was accepted")
	}
	if _, err := auth.LoadRaftTLS(pki.Path("client-alice.pem"), pki.Path("client-alice-key.pem"), pki.Path(devcert.CAFile)); !errors.Is(err, auth.ErrTLSConfig) {
		t.Fatalf("LoadRaftTLS with a client certificate: %v, want auth.ErrTLSConfig", err)
	}
	node2, key2 := devcert.NodeFiles("node-2")
	if _, err := auth.LoadRaftTLS(other.Path(node2), other.Path(key2), pki.Path(devcert.CAFile)); !errors.Is(err, auth.ErrTLSConfig) {
		t.Fatalf("LoadRaftTLS with another CA's certificate: %v, want auth.ErrTLSConfig", err)
	}
	if _, err := auth.LoadTLS(pki.Path("missing.pem"), pki.Path(devcert.ServerKeyFile), ""); !errors.Is(err, auth.ErrTLSConfig) {
		t.Fatalf("LoadTLS with a missing file: %v", err)
	}
	if _, err := auth.LoadTLS(pki.Path(devcert.ServerFile), pki.Path(devcert.CAKeyFile), ""); !errors.Is(err, auth.ErrTLSConfig) {
		t.Fatalf("LoadTLS with a key that does not match: %v", err)
	}
	if _, err := auth.LoadCAPool(pki.Path(devcert.ServerKeyFile)); !errors.Is(err, auth.ErrTLSConfig) {
		t.Fatalf("LoadCAPool of a key file: %v", err)
	}
}
