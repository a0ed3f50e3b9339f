package chaos

import (
	"fmt"
	"io"
	"net"
	"sync"
)

// Net is the harness's network: a TCP proxy in front of every port a node
// serves (Raft, clients), and a block matrix. Every participant connects
// from its own loopback IP (nodes bind their outgoing Raft connections with
// -raft-source, clients bind theirs in their dialer), so a proxy knows who
// a connection comes from. For a blocked pair (a, b), the proxies refuse
// new connections from a to b and from b to a (accepted, then closed at
// once) and close the ones open.
type Net struct {
	mu      sync.Mutex
	names   map[string]string // source IP -> participant
	blocked map[[2]string]bool
	proxies []*Proxy
}

// NewNet returns a network with no proxies and nothing blocked.
func NewNet() *Net {
	return &Net{names: map[string]string{}, blocked: map[[2]string]bool{}}
}

// Name registers the participant that connects from ip.
func (n *Net) Name(ip, name string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.names[ip] = name
}

func (n *Net) nameOf(addr net.Addr) string {
	ip := addr.String()
	if a, ok := addr.(*net.TCPAddr); ok {
		ip = a.IP.String()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if name, ok := n.names[ip]; ok {
		return name
	}
	return ip
}

func (n *Net) isBlocked(from, to string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.blocked[[2]string{from, to}]
}

// Cut blocks a from b and b from a, and closes what connects them.
func (n *Net) Cut(a, b string) {
	n.mu.Lock()
	n.blocked[[2]string{a, b}] = true
	n.blocked[[2]string{b, a}] = true
	proxies := append([]*Proxy(nil), n.proxies...)
	n.mu.Unlock()
	for _, p := range proxies {
		p.closeBlocked()
	}
}

// Mend unblocks a and b.
func (n *Net) Mend(a, b string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.blocked, [2]string{a, b})
	delete(n.blocked, [2]string{b, a})
}

// MendAll unblocks every pair.
func (n *Net) MendAll() {
	n.mu.Lock()
	defer n.mu.Unlock()
	clear(n.blocked)
}

// Close closes every proxy.
func (n *Net) Close() {
	n.mu.Lock()
	proxies := n.proxies
	n.proxies = nil
	n.mu.Unlock()
	for _, p := range proxies {
		p.Close()
	}
}

// Proxy forwards connections to one participant's port.
type Proxy struct {
	n    *Net
	to   string // the participant behind it
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	tgt  string
	conn map[*pconn]struct{}
	shut bool
}

type pconn struct {
	from      string
	down, up  net.Conn
	closeOnce sync.Once
}

func (c *pconn) close() {
	c.closeOnce.Do(func() {
		c.down.Close()
		c.up.Close()
	})
}

// NewProxy starts a proxy on a free 127.0.0.1 port in front of target, the
// port of participant to.
func (n *Net) NewProxy(to, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: proxy: %w", err)
	}
	p := &Proxy{n: n, to: to, ln: ln, tgt: target, conn: map[*pconn]struct{}{}}
	n.mu.Lock()
	n.proxies = append(n.proxies, p)
	n.mu.Unlock()
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr returns the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// SetTarget changes the address forwarded to (for new connections).
func (p *Proxy) SetTarget(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.tgt = target
}

func (p *Proxy) target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.tgt
}

// Close stops the proxy and closes its connections.
func (p *Proxy) Close() {
	p.mu.Lock()
	p.shut = true
	conns := p.conn
	p.conn = map[*pconn]struct{}{}
	p.mu.Unlock()
	p.ln.Close()
	for c := range conns {
		c.close()
	}
	p.wg.Wait()
}

// closeBlocked closes the connections the block matrix now forbids.
func (p *Proxy) closeBlocked() {
	p.mu.Lock()
	var cut []*pconn
	for c := range p.conn {
		if p.n.isBlocked(c.from, p.to) {
			cut = append(cut, c)
			delete(p.conn, c)
		}
	}
	p.mu.Unlock()
	for _, c := range cut {
		c.close()
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		from := p.n.nameOf(down.RemoteAddr())
		if p.n.isBlocked(from, p.to) {
			down.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(down, from)
	}
}

func (p *Proxy) serve(down net.Conn, from string) {
	defer p.wg.Done()
	up, err := net.Dial("tcp", p.target())
	if err != nil {
		down.Close()
		return
	}
	c := &pconn{from: from, down: down, up: up}
	// Checked and registered under p.mu: a Cut that lands meanwhile either
	// finds the connection registered and closes it, or is seen here.
	p.mu.Lock()
	if p.shut || p.n.isBlocked(from, p.to) {
		p.mu.Unlock()
		c.close()
		return
	}
	p.conn[c] = struct{}{}
	p.mu.Unlock()
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		_, _ = io.Copy(dst, src)
		c.close()
	}
	go pipe(up, down)
	go pipe(down, up)
	wg.Wait()
	p.mu.Lock()
	delete(p.conn, c)
	p.mu.Unlock()
}
