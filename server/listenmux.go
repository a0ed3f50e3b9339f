package server

import (
	"errors"
	"io"
	"net"
	"sync"
	"time"

	"github.com/dlmhq/dlm/api/sessionwire"
)

// preambleTimeout bounds how long a new connection of the client port may
// take to send its first bytes, and a session connection its TLS
// handshake and hello.
const preambleTimeout = 10 * time.Second

// listenMux splits the connections of the client port by their first four
// bytes: a session transport preamble (sessionwire) goes to serve, which
// calls serving once the connection carries a session; the rest
// (gRPC's HTTP/2, plaintext or TLS) is handed to gRPC through Accept, the
// bytes read put back in front. Every client speaks first, so nothing is
// lost by listening before answering.
type listenMux struct {
	net.Listener
	serve func(c net.Conn, preamble string, serving func())
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once

	wg   sync.WaitGroup // the accept loop and each connection's sniffing or session
	mu   sync.Mutex
	open map[net.Conn]bool // connections not handed to gRPC: true once a session's
}

func newListenMux(l net.Listener, serve func(net.Conn, string, func())) *listenMux {
	m := &listenMux{Listener: l, serve: serve, conns: make(chan net.Conn), done: make(chan struct{}), open: map[net.Conn]bool{}}
	m.wg.Add(1)
	go m.run()
	return m
}

// run accepts connections until the listener closes.
func (m *listenMux) run() {
	defer m.wg.Done()
	pause := 5 * time.Millisecond
	for {
		c, err := m.Listener.Accept()
		if err != nil {
			select {
			case <-m.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, say: wait, as net/http does.
			t := time.NewTimer(pause)
			select {
			case <-m.done:
				t.Stop()
				return
			case <-t.C:
			}
			pause = min(2*pause, time.Second)
			continue
		}
		pause = 5 * time.Millisecond
		if !m.track(c) {
			c.Close()
			return
		}
		m.wg.Add(1)
		go m.sniff(c)
	}
}

// track adds c to the connections Close ends; false once closed.
func (m *listenMux) track(c net.Conn) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open == nil {
		return false
	}
	m.open[c] = false
	return true
}

// serving marks c as a session's connection: at shutdown it is given time
// to end by itself.
func (m *listenMux) serving(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.open != nil {
		m.open[c] = true
	}
}

func (m *listenMux) untrack(c net.Conn) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.open, c)
}

// sniff reads c's first bytes and hands it on.
func (m *listenMux) sniff(c net.Conn) {
	defer m.wg.Done()
	var head [sessionwire.PreambleLen]byte
	_ = c.SetReadDeadline(time.Now().Add(preambleTimeout))
	if _, err := io.ReadFull(c, head[:]); err != nil {
		m.untrack(c)
		c.Close()
		return
	}
	if p := string(head[:]); p == sessionwire.PreamblePlain || p == sessionwire.PreambleTLS {
		m.serve(c, p, func() { m.serving(c) }) // it closes c
		m.untrack(c)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	m.untrack(c)
	select {
	case m.conns <- &prefixedConn{Conn: c, head: head[:]}:
	case <-m.done:
		c.Close()
	}
}

// Accept returns the next connection for gRPC.
func (m *listenMux) Accept() (net.Conn, error) {
	select {
	case c := <-m.conns:
		return c, nil
	case <-m.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting (gRPC calls it as it stops). Session connections
// go on until shutdown.
func (m *listenMux) Close() error {
	var err error
	m.once.Do(func() {
		close(m.done)
		err = m.Listener.Close()
	})
	return err
}

// shutdown closes the listener and the connections not yet known, waits
// up to grace for the session connections to end by themselves (their
// streams ended), then closes those left and waits for every goroutine.
func (m *listenMux) shutdown(grace time.Duration) {
	_ = m.Close()
	m.mu.Lock()
	for c, session := range m.open {
		if !session {
			c.Close()
		}
	}
	m.mu.Unlock()
	stopped := make(chan struct{})
	go func() { m.wg.Wait(); close(stopped) }()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-stopped:
		return
	case <-t.C:
	}
	m.mu.Lock()
	for c := range m.open {
		c.Close()
	}
	m.open = nil
	m.mu.Unlock()
	<-stopped
}

// prefixedConn is a connection whose first bytes were read already.
type prefixedConn struct {
	net.Conn
	head []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
