package raftnode

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// streamLayer is Raft's TCP stream layer: it listens on the bind address,
// advertises another address if asked, and binds outgoing connections to a
// chosen local IP if asked (a multi-homed host's interface, or a test
// harness that tells nodes apart by source address). With a TLS
// configuration (see NewRaftTLS), accepted connections are TLS servers and
// dialled ones TLS clients, each end authenticating the other.
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
	tls       *tls.Config // nil: plain TCP
}

// Dial implements raft.StreamLayer. Over TLS, the handshake is done within
// timeout too.
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := s.dialer
	d.Timeout = timeout
	if s.tls == nil {
		return d.Dial("tcp", string(addr))
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	td := tls.Dialer{NetDialer: &d, Config: s.tls}
	return td.DialContext(ctx, "tcp", string(addr))
}

// Addr implements raft.StreamLayer: the advertised address.
func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

// probe dials addr and, over TLS, completes a handshake (each end
// authenticating the other), then hangs up: it tells whether this node
// could reach a node at addr.
func (s *streamLayer) probe(ctx context.Context, addr string) error {
	timeout := 5 * time.Second
	if d, ok := ctx.Deadline(); ok {
		timeout = min(timeout, time.Until(d))
	}
	c, err := s.Dial(raft.ServerAddress(addr), timeout)
	if err != nil {
		return err
	}
	return c.Close()
}

// newTransport makes the node's Raft transport; tlsCfg nil is plain TCP.
func newTransport(bind, advertise, source string, tlsCfg *tls.Config, hl hclog.Logger) (*raft.NetworkTransport, *streamLayer, error) {
	layer, err := newStreamLayer(bind, advertise, source, tlsCfg)
	if err != nil {
		return nil, nil, err
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		// No pipelined replication: when a follower answers a failure (its
		// log's write failed: a full disk) while the next request is on its
		// way, hashicorp/raft's pipeline stops feeding it for good, while
		// heartbeats go on (hashicorp/raft#612; the fault harness's
		// fill-disk hit it within 25 rounds). Each batch waits for the
		// previous one's answer instead.
		MaxRPCsInFlight: 1,
		Timeout:         10 * time.Second,
		Logger:          hl,
	}), layer, nil
}

// newStreamLayer listens on bind.
func newStreamLayer(bind, advertise, source string, tlsCfg *tls.Config) (*streamLayer, error) {
	layer := &streamLayer{tls: tlsCfg}
	if advertise != "" {
		a, err := net.ResolveTCPAddr("tcp", advertise)
		if err != nil {
			return nil, fmt.Errorf("dlm server: raft advertise address: %w", err)
		}
		layer.advertise = a
	}
	if source != "" {
		ip := net.ParseIP(source)
		if ip == nil {
			return nil, fmt.Errorf("dlm server: raft source address %q is not an IP", source)
		}
		layer.dialer.LocalAddr = &net.TCPAddr{IP: ip}
	}
	lis, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("dlm server: raft transport: %w", err)
	}
	layer.Listener = lis
	if a, ok := layer.Addr().(*net.TCPAddr); !ok || a.IP.IsUnspecified() {
		lis.Close()
		return nil, errors.New("dlm server: raft transport: bound to all interfaces without an address to advertise (set the advertise address)")
	}
	if tlsCfg != nil {
		layer.Listener = tls.NewListener(lis, tlsCfg)
	}
	return layer, nil
}

// transportCloser closes a NetworkTransport with its pooled outgoing
// connections: NetworkTransport.Close closes only the listener, so a peer's
// handler would go on reading a connection this node no longer uses (and,
// when the peer closes too, never return).
type transportCloser struct{ *raft.NetworkTransport }

// Close implements io.Closer.
func (t transportCloser) Close() error {
	t.CloseStreams()
	return t.NetworkTransport.Close()
}
