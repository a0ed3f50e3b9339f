package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm/server/cluster"

	"github.com/dlmhq/dlm/server/auth"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"github.com/hashicorp/raft"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/internal/devcert"
	"github.com/dlmhq/dlm/server/raftnode"
)

// httpsClient trusts c's CAs and presents its certificate.
func httpsClient(c *tls.Config) *http.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = c
	return &http.Client{Transport: tr, Timeout: 10 * time.Second}
}

// With TLS, only a client that trusts the server's CA gets through, on
// both ports; a plaintext client fails.
func TestClientTLS(t *testing.T) {
	pki, other := servertest.NewPKI(t), servertest.NewPKI(t)
	s := startServer(t, Config{TLS: pki.ServerTLS(t, false)})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := dialGRPC(t, s.Addr(), pki.ClientTLS(t, "")).Status(ctx, &dlmpb.StatusRequest{}); err != nil {
		t.Fatalf("a client trusting the CA: %v", err)
	}
	if _, err := dialGRPC(t, s.Addr(), nil).Status(ctx, &dlmpb.StatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("a plaintext client: %v, want Unavailable", err)
	}
	_, err := dialGRPC(t, s.Addr(), other.ClientTLS(t, "")).Status(ctx, &dlmpb.StatusRequest{})
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a client trusting another CA: %v, want a certificate error", err)
	}

	base := "https://" + s.HTTPAddr()
	if code, _ := httpGet(t, httpsClient(pki.ClientTLS(t, "")), base+"/v1/status", ""); code != http.StatusOK {
		t.Fatalf("HTTPS status: %d", code)
	}
	if _, err := httpsClient(other.ClientTLS(t, "")).Get(base + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("HTTPS trusting another CA: %v", err)
	}
	if code, _ := httpGet(t, &http.Client{}, "http://"+s.HTTPAddr()+"/healthz", ""); code == http.StatusOK {
		t.Fatal("plain HTTP to the TLS port was served")
	}
}

// With mutual TLS, gRPC clients need a certificate of the client CA, whose
// common name is their identity; HTTP verifies a certificate when given,
// and wants credentials for everything but the health endpoints.
func TestMutualTLS(t *testing.T) {
	pki, other := servertest.NewPKI(t, "alice", "bob"), servertest.NewPKI(t, "alice")
	rules, err := auth.ParseRules(strings.NewReader("alice lock a/\nalice list a/\nbob lock *\nbob list *\n"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &servertest.LogBuffer{}
	s := startServer(t, Config{TLS: pki.ServerTLS(t, true), Rules: rules, Logger: logs.Logger()})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	if _, err := dialGRPC(t, s.Addr(), pki.ClientTLS(t, "")).Status(ctx, &dlmpb.StatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("without a client certificate: %v, want Unavailable (handshake refused)", err)
	}
	if _, err := dialGRPC(t, s.Addr(), withRoots(other.ClientTLS(t, "alice"), pki)).Status(ctx, &dlmpb.StatusRequest{}); status.Code(err) != codes.Unavailable {
		t.Fatalf("with alice's certificate from another CA: %v, want Unavailable (handshake refused)", err)
	}

	// bob locks a/1 and b/1 on a session opened with his certificate.
	st, err := dialGRPC(t, s.Addr(), pki.ClientTLS(t, "bob")).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	bob := &rawSession{t: t, stream: st, cancel: cancel}
	bob.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: "bob"}}})
	bob.sid = bob.recv().GetOpened().GetSession()
	bob.recv()
	bob.granted(bob.lock("a/1", dlmpb.Mode_MODE_EX))
	bob.granted(bob.lock("b/1", dlmpb.Mode_MODE_EX))

	resp, err := dialGRPC(t, s.Addr(), pki.ClientTLS(t, "alice")).List(ctx, &dlmpb.ListRequest{})
	if err != nil || len(resp.GetResources()) != 1 || resp.GetResources()[0].GetName() != "a/1" {
		t.Fatalf("alice's List by certificate: %v %v", resp, err)
	}

	base := "https://" + s.HTTPAddr()
	if code, _ := httpGet(t, httpsClient(pki.ClientTLS(t, "")), base+"/readyz", ""); code != http.StatusOK {
		t.Fatalf("readyz without a client certificate: %d", code)
	}
	if code, _ := httpGet(t, httpsClient(pki.ClientTLS(t, "")), base+"/v1/resources", ""); code != http.StatusUnauthorized {
		t.Fatalf("resources without a client certificate: %d, want 401", code)
	}
	if _, err := httpsClient(withRoots(other.ClientTLS(t, "alice"), pki)).Get(base + "/readyz"); err == nil {
		t.Fatal("HTTPS with a certificate of another CA was served")
	}
	code, body := httpGet(t, httpsClient(pki.ClientTLS(t, "alice")), base+"/v1/resources", "")
	if code != http.StatusOK || !strings.Contains(body, `"a/1"`) || strings.Contains(body, `"b/1"`) {
		t.Fatalf("alice's resources by certificate: %d %s", code, body)
	}
}

// withRoots returns c trusting p's CA instead.
func withRoots(c *tls.Config, p *servertest.PKI) *tls.Config {
	pool, _ := auth.LoadCAPool(p.Path(devcert.CAFile))
	c.RootCAs = pool
	return c
}

// slowRaft tolerates a loaded machine (the race detector, two cores).
func slowRaft(c *raft.Config) {
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 500 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
}

// A cluster over TLS everywhere: three nodes form it through -join over
// HTTPS with an admin token, replicate over mutually authenticated Raft
// TLS; a node whose certificate comes from another CA cannot join; normal
// identities cannot change or list the membership.
func TestRaftTLSCluster(t *testing.T) {
	pki, other := servertest.NewPKI(t), servertest.NewPKI(t)
	tokens := map[string]string{"ops": newToken(t), "alice": newToken(t)}
	tokFile := writeFile(t, "tokens", "ops "+tokens["ops"]+"\nalice "+tokens["alice"]+"\n")
	rules, err := auth.ParseRules(strings.NewReader("ops admin *\nops list *\nalice lock *\nalice list *\n"))
	if err != nil {
		t.Fatal(err)
	}
	toks, err := auth.LoadTokens(tokFile)
	if err != nil {
		t.Fatal(err)
	}
	logs := &servertest.LogBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs:\n%s", logs)
		}
	})
	start := func(id string, p *servertest.PKI, join bool) *Server {
		t.Helper()
		s, err := Start(Config{
			Node:          raftnode.Config{ID: id, InMemory: true, Join: join, Raft: slowRaft, RaftTLS: p.RaftTLS(t, id)},
			HTTPAddr:      "127.0.0.1:0",
			SessionMargin: 10 * time.Millisecond,
			Logger:        logs.Logger().With("node", id),
			TLS:           pki.ServerTLS(t, false),
			Tokens:        toks,
			Rules:         rules,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admin := []cluster.Option{cluster.WithTLS(pki.ClientTLS(t, "")), cluster.WithToken(tokens["ops"])}

	n1 := start("node-1", pki, false)
	if err := n1.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	nodes := []*Server{n1}
	for _, id := range []string{"node-2", "node-3"} {
		n := start(id, pki, true)
		if err := n.Join(ctx, n1.HTTPAddr(), admin...); err != nil {
			t.Fatalf("%s joining over HTTPS with the admin token: %v", id, err)
		}
		nodes = append(nodes, n)
	}
	members, err := cluster.Members(ctx, n1.HTTPAddr(), admin...)
	if err != nil || len(members.Members) != 3 {
		t.Fatalf("members: %+v %v", members, err)
	}

	// Replication over Raft TLS: a lock taken on the leader reaches every
	// node's state.
	var leader *Server
	for leader == nil { // an election may run after the joins: retry on the leader
		waitFor(t, ctx, "a leader", func() bool {
			for _, n := range nodes {
				if n.Ready() {
					leader = n
					return true
				}
			}
			return false
		})
		sctx, scancel := context.WithCancel(ctx)
		defer scancel()
		st, err := dialGRPC(t, leader.Addr(), pki.ClientTLS(t, "")).Session(bearer(sctx, tokens["alice"]))
		if err != nil {
			t.Fatal(err)
		}
		if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: "alice"}}}); err != nil {
			t.Fatal(err)
		}
		m, err := st.Recv()
		if status.Code(err) == codes.Unavailable {
			leader = nil
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		alice := &rawSession{t: t, stream: st, cancel: scancel, sid: m.GetOpened().GetSession()}
		alice.recv()
		alice.granted(alice.lock("replicated", dlmpb.Mode_MODE_EX))
	}
	target := leader.Node().FSM().AppliedIndex()
	for _, n := range nodes {
		waitFor(t, ctx, "node "+n.Node().ID()+" applying the lock", func() bool { return n.Node().FSM().AppliedIndex() >= target })
	}

	// A node whose Raft certificate another CA signed is refused at the
	// join: the leader cannot authenticate it.
	stranger := start("node-4", other, true)
	err = stranger.Join(ctx, n1.HTTPAddr(), admin...)
	if err == nil || !strings.Contains(err.Error(), "Raft TLS") {
		t.Fatalf("a node of another CA joining: %v, want a refusal naming Raft TLS", err)
	}
	// Even if it were in the configuration, it could not replicate: a
	// Raft connection to a member with its certificate fails the handshake.
	if err := stranger.Node().Probe(ctx, n1.Node().Addr()); err == nil {
		t.Fatal("a Raft connection with another CA's certificate was established")
	}
	if got := stranger.Node().FSM().AppliedIndex(); got != 0 {
		t.Fatalf("the stranger applied up to %d", got)
	}

	// Normal identities may not list or change the membership.
	if _, err := cluster.Members(ctx, n1.HTTPAddr(), cluster.WithTLS(pki.ClientTLS(t, "")), cluster.WithToken(tokens["alice"])); !errors.Is(err, auth.ErrPermissionDenied) {
		t.Fatalf("alice listing members: %v, want auth.ErrPermissionDenied", err)
	}
	if err := cluster.Remove(ctx, n1.HTTPAddr(), "node-3", cluster.WithTLS(pki.ClientTLS(t, "")), cluster.WithToken(tokens["alice"])); !errors.Is(err, auth.ErrPermissionDenied) {
		t.Fatalf("alice removing node-3: %v, want auth.ErrPermissionDenied", err)
	}
	if err := cluster.Remove(ctx, n1.HTTPAddr(), "node-3", cluster.WithTLS(pki.ClientTLS(t, ""))); !errors.Is(err, auth.ErrUnauthenticated) {
		t.Fatalf("removing node-3 without a token: %v, want auth.ErrUnauthenticated", err)
	}
	if err := cluster.Remove(ctx, n1.HTTPAddr(), "node-3", cluster.WithToken(tokens["ops"])); err == nil {
		t.Fatal("a token was sent without TLS")
	}
	if members, err := cluster.Members(ctx, n1.HTTPAddr(), admin...); err != nil || len(members.Members) != 3 {
		t.Fatalf("members after the refusals: %+v %v", members, err)
	}
	if err := cluster.Remove(ctx, n1.HTTPAddr(), "node-3", admin...); err != nil {
		t.Fatalf("ops removing node-3: %v", err)
	}
	waitFor(t, ctx, "node-3 gone", func() bool {
		m, err := cluster.Members(ctx, n1.HTTPAddr(), admin...)
		return err == nil && len(m.Members) == 2
	})
}

// waitFor polls cond until it holds or ctx ends.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}
