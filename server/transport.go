package server

import (
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
// harness that tells nodes apart by source address).
type streamLayer struct {
	net.Listener
	advertise net.Addr
	dialer    net.Dialer
}

// Dial implements raft.StreamLayer.
func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := s.dialer
	d.Timeout = timeout
	return d.Dial("tcp", string(addr))
}

// Addr implements raft.StreamLayer: the advertised address.
func (s *streamLayer) Addr() net.Addr {
	if s.advertise != nil {
		return s.advertise
	}
	return s.Listener.Addr()
}

// newTransport makes the node's Raft transport.
func newTransport(bind, advertise, source string, hl hclog.Logger) (*raft.NetworkTransport, error) {
	layer, err := newStreamLayer(bind, advertise, source)
	if err != nil {
		return nil, err
	}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  hl,
	}), nil
}

// newStreamLayer listens on bind.
func newStreamLayer(bind, advertise, source string) (*streamLayer, error) {
	layer := &streamLayer{}
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
	return layer, nil
}
