package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// newToken returns a random token.
func newToken(t testing.TB) string {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "tok-" + hex.EncodeToString(b)
}

// writeFile writes content to a new file in a temporary directory.
func writeFile(t testing.TB, name, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// dialGRPC returns a client of addr over TLS (nil: plaintext).
func dialGRPC(t testing.TB, addr string, c *tls.Config) dlmpb.DLMClient {
	t.Helper()
	creds := insecure.NewCredentials()
	if c != nil {
		creds = credentials.NewTLS(c)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return dlmpb.NewDLMClient(conn)
}

// bearer returns ctx sending token with gRPC calls ("" sends none).
func bearer(ctx context.Context, token string) context.Context {
	if token == "" {
		return ctx
	}
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
}

// httpGet does GET url with token ("" for none) and optional cookies, and
// returns the status and body.
func httpGet(t testing.TB, client *http.Client, url, token string, cookies ...*http.Cookie) (int, string) {
	t.Helper()
	return httpDo(t, client, http.MethodGet, url, token, "", cookies...)
}

// httpDo runs one request and returns the status and body (at most 1 MiB;
// an event stream is read until its first event).
func httpDo(t testing.TB, client *http.Client, method, url, token, body string, cookies ...*http.Cookie) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for _, c := range cookies {
		req.AddCookie(c)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for out.Len() < 1<<20 {
		n, err := resp.Body.Read(buf)
		out.Write(buf[:n])
		if err != nil || (strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") && strings.Contains(out.String(), "\ndata: ") && strings.HasSuffix(out.String(), "\n\n")) {
			break
		}
	}
	return resp.StatusCode, out.String()
}
