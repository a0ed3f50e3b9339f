package dlmserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/devcert"
	"github.com/dlmhq/dlm/internal/testenv"
)

// secureEnv is a CA and the token files of alice and carol.
type secureEnv struct {
	dir, otherCA string
	tokens       string            // the server's token file
	rules        string            // the server's rules file
	tokenFile    map[string]string // identity -> a client token file
	token        map[string]string
}

func newSecureEnv(t *testing.T) *secureEnv {
	t.Helper()
	e := &secureEnv{dir: t.TempDir(), tokenFile: map[string]string{}, token: map[string]string{}}
	if _, err := devcert.Write(e.dir, devcert.WithHosts("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	other := t.TempDir()
	if _, err := devcert.Write(other, devcert.WithHosts("127.0.0.1")); err != nil {
		t.Fatal(err)
	}
	e.otherCA = filepath.Join(other, devcert.CAFile)
	var lines []string
	for _, id := range []string{"alice", "carol"} {
		e.token[id] = id + "-0123456789abcdef-" + strings.Repeat("x", 8)
		e.tokenFile[id] = e.write(t, id+".token", e.token[id]+"\n")
		lines = append(lines, id+" "+e.token[id])
	}
	e.tokens = e.write(t, "tokens", strings.Join(lines, "\n")+"\n")
	e.rules = e.write(t, "rules", "alice lock a/\nalice list a/\n")
	return e
}

func (e *secureEnv) write(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(e.dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// trust returns a TLS configuration trusting the CA in file.
func trust(t *testing.T, file string) *tls.Config {
	t.Helper()
	pem, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatal("no CA in " + file)
	}
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// A dlm server with TLS, tokens and rules: the store sends its token over
// TLS only, is refused without one, sees PermissionDenied on a name it may
// not lock (and stays usable), and lists only what it may.
func TestTLSAndToken(t *testing.T) {
	e := newSecureEnv(t)
	srv := testenv.StartDLM(t, bin, "-in-memory",
		"-tls-cert", filepath.Join(e.dir, devcert.ServerFile), "-tls-key", filepath.Join(e.dir, devcert.ServerKeyFile),
		"-auth-tokens", e.tokens, "-auth-rules", e.rules)
	caFile := filepath.Join(e.dir, devcert.CAFile)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	alice := dial(t, srv.Addr(), dlmserver.WithTLS(trust(t, caFile)), dlmserver.WithTokenFile(e.tokenFile["alice"]), dlmserver.WithLabel("alice"))
	c := dlm.New(alice)
	l, err := c.Acquire(ctx, "a/job", dlm.WithWait(0))
	if err != nil {
		t.Fatalf("alice on a/: %v", err)
	}
	// A wait that a refusal ends at once; long enough that a loaded machine
	// does not end it first (it would then read as contention).
	_, err = c.Acquire(ctx, "b/job", dlm.WithWait(10*time.Second))
	if !errors.Is(err, dlmserver.ErrPermissionDenied) || !errors.Is(err, dlm.ErrInvalid) || errors.Is(err, dlm.ErrUnavailable) {
		t.Fatalf("alice on b/: %v, want ErrPermissionDenied (and ErrInvalid, not ErrUnavailable)", err)
	}
	l2, err := c.Acquire(ctx, "a/job2", dlm.WithWait(0))
	if err != nil {
		t.Fatalf("alice on a/ after the refusal: %v", err)
	}
	res, err := alice.List(ctx, "", 100)
	if err != nil || len(res) != 2 || res[0].Resource != "a/job" {
		t.Fatalf("alice's listing: %+v %v", res, err)
	}
	l.Release(ctx)
	l2.Release(ctx)

	// carol is authenticated, without rights.
	carol := dial(t, srv.Addr(), dlmserver.WithTLS(trust(t, caFile)), dlmserver.WithToken(e.token["carol"]))
	if _, err := carol.Status(ctx); !errors.Is(err, dlmserver.ErrPermissionDenied) {
		t.Fatalf("carol's status: %v, want ErrPermissionDenied", err)
	}

	refused := func(what string, want error, opts ...dlmserver.Option) {
		t.Helper()
		dctx, dcancel := context.WithTimeout(ctx, 10*time.Second)
		defer dcancel()
		s, err := dlmserver.Dial(dctx, srv.Addr(), opts...)
		if err == nil {
			s.Close(ctx)
			t.Fatalf("%s: dialled", what)
		}
		if !errors.Is(err, want) {
			t.Fatalf("%s: %v, want %v", what, err, want)
		}
		for _, tok := range e.token {
			if strings.Contains(err.Error(), tok) {
				t.Fatalf("%s: the error shows a token: %v", what, err)
			}
		}
	}
	refused("no token", dlmserver.ErrUnauthenticated, dlmserver.WithTLS(trust(t, caFile)))
	refused("unknown token", dlmserver.ErrUnauthenticated, dlmserver.WithTLS(trust(t, caFile)), dlmserver.WithToken("mallory-0123456789abcdef"))
	refused("a token without TLS", dlm.ErrInvalid, dlmserver.WithToken(e.token["alice"]))
	refused("a plaintext client", dlm.ErrUnavailable)
	refused("a client trusting another CA", dlm.ErrUnavailable, dlmserver.WithTLS(trust(t, e.otherCA)), dlmserver.WithToken(e.token["alice"]))
	refused("a token file with two lines", dlm.ErrInvalid, dlmserver.WithTLS(trust(t, caFile)), dlmserver.WithTokenFile(e.tokens))
}

// A token goes over plaintext only when the store says so explicitly (a
// loopback test, a network one trusts entirely).
func TestTokenOverPlaintextOptIn(t *testing.T) {
	e := newSecureEnv(t)
	srv := testenv.StartDLM(t, bin, "-in-memory", "-auth-tokens", e.tokens, "-auth-rules", e.rules)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if s, err := dlmserver.Dial(ctx, srv.Addr(), dlmserver.WithToken(e.token["alice"])); err == nil {
		s.Close(ctx)
		t.Fatal("a token was sent over plaintext without the opt-in")
	} else if !errors.Is(err, dlm.ErrInvalid) || !strings.Contains(err.Error(), "TLS") {
		t.Fatalf("without the opt-in: %v", err)
	}
	s := dial(t, srv.Addr(), dlmserver.WithToken(e.token["alice"]), dlmserver.AllowTokenOverPlaintext())
	l, err := dlm.New(s).Acquire(ctx, "a/plain", dlm.WithWait(0))
	if err != nil {
		t.Fatal(err)
	}
	l.Release(ctx)
}
