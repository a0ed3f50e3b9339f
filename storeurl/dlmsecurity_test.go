package storeurl_test

import (
	"context"
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
	"github.com/dlmhq/dlm/storeurl"
)

func TestParseDLMSecurity(t *testing.T) {
	for url, tls := range map[string]bool{
		"dlm://h":                                  false,
		"dlms://h":                                 true,
		"dlm://h?tls=true":                         true,
		"dlm://h?tls=false":                        false,
		"dlm://h?ca=/x/ca.pem":                     true,
		"dlm://h?server_name=dlm.example":          true,
		"dlms://h?cert=c.pem&key=k.pem&ca=ca.pem":  true,
		"dlms://h?token_file=/run/dlm/token":       true,
		"dlm://h?tls=1&token_file=/run/dlm/token":  true,
		"dlms://a:1,b:2?ca=ca.pem&session_ttl=10s": true,
	} {
		spec, err := storeurl.Parse(url)
		if err != nil {
			t.Errorf("Parse(%q): %v", url, err)
			continue
		}
		if spec.Kind != storeurl.KindDLM || spec.TLS != tls {
			t.Errorf("Parse(%q): kind %s, TLS %v; want dlm, %v", url, spec.Kind, spec.TLS, tls)
		}
		if spec.URL.Query().Has("ca") || spec.URL.Query().Has("token_file") {
			t.Errorf("Parse(%q): parameters left in the URL", url)
		}
	}
	for url, want := range map[string]string{
		"dlm://h?token=0123456789abcdef":        "never goes in a URL",
		"dlms://h?token=0123456789abcdef":       "never goes in a URL",
		"dlm://h?token_file=/t":                 "needs TLS",
		"dlm://h?tls=false&token_file=/t":       "needs TLS",
		"dlms://h?tls=false":                    "contradicts dlms://",
		"dlm://h?tls=false&ca=ca.pem":           "contradicts ca=",
		"dlms://h?cert=c.pem":                   "cert and key go together",
		"dlms://h?key=k.pem":                    "cert and key go together",
		"dlm://h?tls=maybe":                     "true or false",
		"dlms://h?ca=":                          "empty",
		"dlms://h?token_file=":                  "empty",
		"dlms://u:p@h":                          "no user",
		"dlms://h?token_file=/t&token_file=/t2": "given 2 times",
		"dlms://h?server_name=a&server_name=b":  "given 2 times",
	} {
		_, err := storeurl.Parse(url)
		if err == nil || !strings.Contains(err.Error(), want) || !errors.Is(err, storeurl.ErrBadURL) {
			t.Errorf("Parse(%q) = %v, want ErrBadURL with %q", url, err, want)
		}
		if err != nil && strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("Parse(%q): the error shows the token: %v", url, err)
		}
	}
	if got := storeurl.Redact("dlm://h:1?token=0123456789abcdef"); strings.Contains(got, "0123456789abcdef") {
		t.Errorf("Redact kept a token: %s", got)
	}
	if _, err := storeurl.Open(t.Context(), "dlm://127.0.0.1:1", storeurl.WithTokenFile("/t")); err == nil || !strings.Contains(err.Error(), "no TLS") {
		t.Errorf("Open of a plaintext URL with a token file: %v", err)
	}
}

// A dlms:// URL with ca= and token_file= opens a session on a server with
// TLS and tokens; the token file of WithTokenFile ($DLM_TOKEN_FILE) serves
// when the URL has none; without a token the server refuses.
func TestOpenDLMSecure(t *testing.T) {
	dir := t.TempDir()
	if _, err := devcert.Write(dir, devcert.WithHosts("127.0.0.1", "localhost"), devcert.WithClients("carol")); err != nil {
		t.Fatal(err)
	}
	const token = "alice-0123456789abcdef-token"
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	tokens := write("tokens", "alice "+token+"\n")
	tokenFile := write("alice.token", token+"\n")
	ca := filepath.Join(dir, devcert.CAFile)
	srv := testenv.StartDLM(t, dlmBin, "-in-memory",
		"-tls-cert", filepath.Join(dir, devcert.ServerFile), "-tls-key", filepath.Join(dir, devcert.ServerKeyFile),
		"-tls-client-ca", ca, "-auth-tokens", tokens)

	ccert, ckey := devcert.ClientFiles("carol")
	base := "dlms://" + srv.Addr() + "?ca=" + ca
	exclusive(t, base+"&token_file="+tokenFile+"&cert="+filepath.Join(dir, ccert)+"&key="+filepath.Join(dir, ckey), storeurl.KindDLM)

	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	// The client certificate alone authenticates (identity carol) ...
	s, err := storeurl.Open(ctx, base+"&server_name=localhost&cert="+filepath.Join(dir, ccert)+"&key="+filepath.Join(dir, ckey))
	if err != nil {
		t.Fatalf("with carol's certificate: %v", err)
	}
	if _, err := dlm.New(s.Driver()).Acquire(ctx, "carol", dlm.WithWait(0)); err != nil {
		t.Fatal(err)
	}
	s.Close(ctx)
	// ... and without one, the TLS handshake fails (mutual TLS).
	if s, err := storeurl.Open(ctx, base, storeurl.WithTokenFile(tokenFile)); err == nil {
		s.Close(ctx)
		t.Fatal("opened without a client certificate under mutual TLS")
	}
	// A wrong server name fails verification.
	if s, err := storeurl.Open(ctx, base+"&server_name=elsewhere.example&cert="+filepath.Join(dir, ccert)+"&key="+filepath.Join(dir, ckey)); err == nil {
		s.Close(ctx)
		t.Fatal("opened with a server name the certificate does not have")
	} else if !errors.Is(err, dlm.ErrUnavailable) || errors.Is(err, dlmserver.ErrUnauthenticated) {
		t.Fatalf("wrong server name: %v", err)
	}
}
