package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/testenv"
)

// secureFiles are the files of a secured deployment, made as docs/security.md's
// walkthrough makes them: dlm certs, a token file, a rules file, and one
// token file per client.
type secureFiles struct {
	certs, tokens, rules string
	token, tokenFile     map[string]string
}

// The rules of the process tests: ops administers, alice locks and lists
// a/, bob locks and lists everything.
const secureRules = "ops admin *\nops list *\nalice lock a/\nalice list a/\nbob lock *\nbob list *\n"

func newSecureFiles(t *testing.T) *secureFiles {
	t.Helper()
	dir := t.TempDir()
	f := &secureFiles{certs: filepath.Join(dir, "certs"), token: map[string]string{}, tokenFile: map[string]string{}}
	if code, out, stderr := runDLM(t, nil, "certs", "-dir", f.certs, "-hosts", "127.0.0.1,localhost", "-nodes", "node-1,node-2,node-3"); code != 0 {
		t.Fatalf("dlm certs: exit %d\n%s%s", code, out, stderr)
	}
	var lines []string
	for i, id := range []string{"ops", "alice", "bob"} {
		f.token[id] = fmt.Sprintf("%s-token-%d-0123456789abcdefghij", id, i)
		f.tokenFile[id] = filepath.Join(dir, id+".token")
		if err := os.WriteFile(f.tokenFile[id], []byte(f.token[id]+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, id+" "+f.token[id])
	}
	f.tokens = filepath.Join(dir, "tokens")
	f.rules = filepath.Join(dir, "rules")
	if err := os.WriteFile(f.tokens, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.rules, []byte(secureRules), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *secureFiles) path(name string) string { return filepath.Join(f.certs, name) }

// serverFlags are node id's security flags.
func (f *secureFiles) serverFlags(id string) []string {
	return []string{"-tls-cert", f.path("server.pem"), "-tls-key", f.path("server-key.pem"),
		"-raft-tls-ca", f.path("ca.pem"), "-raft-tls-cert", f.path("raft-" + id + ".pem"), "-raft-tls-key", f.path("raft-" + id + "-key.pem"),
		"-auth-tokens", f.tokens, "-auth-rules", f.rules, "-raft-timeout", "500ms"}
}

// dial opens a dlmserver store as identity id over TLS.
func (f *secureFiles) dial(t *testing.T, addrs, id string) *dlmserver.Store {
	t.Helper()
	pem, err := os.ReadFile(f.path("ca.pem"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(pem)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := dlmserver.Dial(ctx, addrs, dlmserver.WithTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}),
		dlmserver.WithTokenFile(f.tokenFile[id]), dlmserver.WithLabel(id))
	if err != nil {
		t.Fatalf("%s: %v", id, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// joinNode starts node id joining through httpAddr over HTTPS with the ops
// token, and waits until it has joined.
func (f *secureFiles) joinNode(t *testing.T, id, httpAddr string) (addr string) {
	t.Helper()
	addr = "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t))
	args := append([]string{"server", "-id", id, "-addr", addr,
		"-http", "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)), "-raft-addr", "127.0.0.1:" + strconv.Itoa(testenv.FreePort(t)),
		"-data", filepath.Join(t.TempDir(), "data"), "-join", httpAddr,
		"-join-ca", f.path("ca.pem"), "-join-token-file", f.tokenFile["ops"]}, f.serverFlags(id)...)
	p := startDLM(t, nil, args...)
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(p.stderr.String(), "joined the cluster") {
		select {
		case <-p.done:
			t.Fatalf("%s exited with %d:\n%s", id, p.code, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not join:\n%s", id, p.stderr)
		}
	}
	if s := p.stderr.String(); strings.Contains(s, f.token["ops"]) {
		t.Fatalf("%s logged the join token", id)
	}
	return addr
}

// A cluster secured end to end, driven by the dlm command: dlm certs
// makes the certificates, nodes join over HTTPS with an admin token and
// replicate over Raft TLS; dlm run, ls and status reach it through a
// dlms:// URL with $DLM_TOKEN_FILE, within their identity's rights;
// dlm cluster needs the admin permission.
func TestSecureCluster(t *testing.T) {
	f := newSecureFiles(t)
	n1 := testenv.StartDLM(t, dlmBin(t), f.serverFlags("node-1")...)
	addrs := []string{n1.Addr()}
	for _, id := range []string{"node-2", "node-3"} {
		addrs = append(addrs, f.joinNode(t, id, n1.HTTPAddr()))
	}
	admin := []string{"--http", n1.HTTPAddr(), "--ca", f.path("ca.pem")}
	as := func(id string) []string { return []string{"DLM_TOKEN_FILE=" + f.tokenFile[id]} }

	code, out, stderr := runDLM(t, as("ops"), append([]string{"cluster", "members"}, admin...)...)
	if code != 0 || strings.Count(out, "voter") != 3 || strings.Count(out, "leader") != 1 {
		t.Fatalf("members as ops: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := runDLM(t, as("alice"), append([]string{"cluster", "members"}, admin...)...); code != exitDenied {
		t.Fatalf("members as alice: exit %d, want %d\n%s", code, exitDenied, stderr)
	}
	if code, _, stderr := runDLM(t, as("alice"), append([]string{"cluster", "remove"}, append(admin, "node-3")...)...); code != exitDenied {
		t.Fatalf("remove as alice: exit %d, want %d\n%s", code, exitDenied, stderr)
	}
	if code, _, stderr := runDLM(t, nil, append([]string{"cluster", "remove"}, append(admin, "node-3")...)...); code != exitDenied {
		t.Fatalf("remove without a token: exit %d, want %d\n%s", code, exitDenied, stderr)
	}
	if code, _, _ := runDLM(t, as("ops"), "cluster", "members", "--http", n1.HTTPAddr()); code != exitUsage {
		t.Fatalf("members with a token and no --ca: exit %d, want %d (no token over plain HTTP)", code, exitUsage)
	}
	if _, out, _ := runDLM(t, as("ops"), append([]string{"cluster", "members"}, admin...)...); !strings.Contains(out, "node-3") {
		t.Fatalf("node-3 gone after refused removals:\n%s", out)
	}

	// bob holds b/hidden, which alice may not see.
	bob := dlm.New(f.dial(t, strings.Join(addrs, ","), "bob"))
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if _, err := bob.Acquire(ctx, "b/hidden", dlm.WithTTL(time.Minute)); err != nil {
		t.Fatal(err)
	}

	store := "--store=dlms://" + strings.Join(addrs, ",") + "?ca=" + f.path("ca.pem")
	if code, out, stderr := runDLM(t, as("alice"), "run", store, "--lock", "a/job", "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("dlm run as alice on a/: exit %d %q\n%s", code, out, stderr)
	}
	code, out, stderr = runDLM(t, as("alice"), "run", store, "--lock", "b/job", "--", "echo", "ran")
	if code != exitDenied || out != "" || !strings.Contains(stderr, "permission denied") {
		t.Fatalf("dlm run as alice on b/: exit %d %q\n%s", code, out, stderr)
	}
	if code, _, stderr := runDLM(t, nil, "run", store, "--lock", "a/job", "--", "echo", "ran"); code != exitDenied {
		t.Fatalf("dlm run without a token: exit %d, want %d\n%s", code, exitDenied, stderr)
	}
	// alice's listing shows a/ only: she holds a/held while it runs.
	held := startDLM(t, as("alice"), "run", store, "--lock", "a/held", "--", "sleep", "30")
	waitListed(t, as("bob"), store, "a/held")
	code, out, stderr = runDLM(t, as("alice"), "ls", store)
	if code != 0 || !strings.Contains(out, "a/held") || strings.Contains(out, "b/hidden") {
		t.Fatalf("dlm ls as alice: exit %d\n%s%s", code, out, stderr)
	}
	if _, out, _ := runDLM(t, as("bob"), "ls", store); !strings.Contains(out, "b/hidden") || !strings.Contains(out, "a/held") {
		t.Fatalf("dlm ls as bob:\n%s", out)
	}
	held.cmd.Process.Signal(os.Interrupt)
	held.wait(t, 10*time.Second)
	if code, out, stderr := runDLM(t, as("alice"), "status", store); code != 0 || !strings.Contains(out, "leader") {
		t.Fatalf("dlm status as alice: exit %d\n%s%s", code, out, stderr)
	}
	// A plaintext client gets nowhere; a token is never sent in plaintext.
	if code, _, _ := runDLM(t, nil, "status", "--store=dlm://"+n1.Addr()); code != exitUnavailable {
		t.Fatalf("dlm status in plaintext: exit %d, want %d", code, exitUnavailable)
	}
	if code, out, stderr := runDLM(t, as("alice"), "status", "--store=dlm://"+n1.Addr()); code != exitUsage || !strings.Contains(out, "no TLS") {
		t.Fatalf("dlm status with a token file over plaintext: exit %d, want %d\n%s%s", code, exitUsage, out, stderr)
	}
}

// waitListed waits until dlm ls (with env) lists name.
func waitListed(t *testing.T, env []string, store, name string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if _, out, _ := runDLM(t, env, "ls", store); strings.Contains(out, name) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never listed", name)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Bad security configuration stops dlm server at once, with a message
// that names the problem.
func TestServerSecurityConfigErrors(t *testing.T) {
	f := newSecureFiles(t)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := []string{"server", "-in-memory", "-addr", "127.0.0.1:0", "-http", "", "-raft-addr", "127.0.0.1:0"}
	for name, c := range map[string]struct {
		args []string
		want string
	}{
		"cert without key":      {[]string{"-tls-cert", f.path("server.pem")}, "-tls-key"},
		"client CA without TLS": {[]string{"-tls-client-ca", f.path("ca.pem")}, "-tls-cert"},
		"rules without auth":    {[]string{"-auth-rules", f.rules}, "needs authentication"},
		"unreadable tokens":     {[]string{"-auth-tokens", filepath.Join(dir, "missing")}, "no such file"},
		"duplicate token":       {[]string{"-auth-tokens", write("dup", "a 0123456789abcdefXYZ\nb 0123456789abcdefXYZ\n")}, "same token as line 1"},
		"unknown permission":    {[]string{"-auth-tokens", f.tokens, "-auth-rules", write("rules", "alice write a/\n")}, "unknown permission"},
		"bad PEM":               {[]string{"-tls-cert", f.tokens, "-tls-key", f.path("server-key.pem")}, "bad TLS configuration"},
		"raft CA without cert":  {[]string{"-raft-tls-ca", f.path("ca.pem")}, "-raft-tls-cert"},
		"join token without CA": {[]string{"-join", "127.0.0.1:1", "-join-token-file", f.tokenFile["ops"]}, "-join-ca"},
		"client cert for raft":  {[]string{"-raft-tls-ca", f.path("ca.pem"), "-raft-tls-cert", f.tokens, "-raft-tls-key", f.tokens}, "bad TLS configuration"},
	} {
		code, _, stderr := runDLM(t, nil, append(base, c.args...)...)
		if code != exitUsage || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, want %d with %q:\n%s", name, code, exitUsage, c.want, stderr)
		}
		if strings.Contains(stderr, "0123456789abcdefXYZ") {
			t.Errorf("%s: the message quotes a token", name)
		}
	}
}
