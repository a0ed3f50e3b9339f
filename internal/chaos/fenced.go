package chaos

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/dlmhq/dlm/internal/chaos/history"
)

// Write is what a critical section writes to the fenced store: its token,
// who it is, and when it started and (for the last write) ended, on the
// shared monotonic clock.
type Write struct {
	Resource string `json:"resource"`
	Token    uint64 `json:"token"`
	Client   string `json:"client"`
	Lease    uint64 `json:"lease"`
	Phase    string `json:"phase"` // "begin", "tick" or "end"
	Start    int64  `json:"start"`
	End      int64  `json:"end,omitempty"`
}

// FencedStore is the protected resource: an HTTP server on 127.0.0.1 that
// keeps, per resource, the greatest token it has seen and rejects a write
// with a lower one. It records every decision in the history
// (WriteAccepted, WriteRejected), stamped when it is taken.
type FencedStore struct {
	h   *history.History
	ln  net.Listener
	srv *http.Server

	mu   sync.Mutex
	max  map[string]uint64
	last map[string]Write // the last accepted write per resource
}

// StartFenced starts a fenced store recording into h.
func StartFenced(h *history.History) (*FencedStore, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("chaos: fenced store: %w", err)
	}
	f := &FencedStore{h: h, ln: ln, max: map[string]uint64{}, last: map[string]Write{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /write", f.serveWrite)
	f.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = f.srv.Serve(ln) }()
	return f, nil
}

// URL returns the store's base URL.
func (f *FencedStore) URL() string { return "http://" + f.ln.Addr().String() }

// Close stops the server.
func (f *FencedStore) Close() error { return f.srv.Close() }

// Apply decides one write: accepted unless its token is lower than the
// greatest the resource has seen. The decision is recorded in the history.
func (f *FencedStore) Apply(w Write) (ok bool, max uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	max = f.max[w.Resource]
	ok = w.Token >= max
	e := history.Event{Kind: history.WriteRejected, Client: w.Client, Lease: w.Lease, Resource: w.Resource, Token: w.Token}
	if ok {
		e.Kind = history.WriteAccepted
		f.max[w.Resource] = w.Token
		f.last[w.Resource] = w
		max = w.Token
		e.Note = w.Phase
	} else {
		e.Note = fmt.Sprintf("%s: token %d is below %d", w.Phase, w.Token, max)
	}
	e.At = history.Now()
	f.h.Add(e)
	return ok, max
}

func (f *FencedStore) serveWrite(rw http.ResponseWriter, r *http.Request) {
	var w Write
	if err := json.NewDecoder(http.MaxBytesReader(rw, r.Body, 4096)).Decode(&w); err != nil {
		http.Error(rw, err.Error(), http.StatusBadRequest)
		return
	}
	ok, max := f.Apply(w)
	status := http.StatusOK
	if !ok {
		status = http.StatusConflict
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(status)
	_ = json.NewEncoder(rw).Encode(map[string]any{"ok": ok, "max": max})
}

// ErrFenced is a write the fenced store rejected for a stale token.
var ErrFenced = errors.New("chaos: the fenced store rejected a stale token")

// fencedClient writes to a fenced store.
type fencedClient struct {
	url string
	hc  *http.Client
}

func newFencedClient(url string) *fencedClient {
	return &fencedClient{url: url, hc: &http.Client{Timeout: 5 * time.Second}}
}

// write sends w; it returns ErrFenced when the store rejects the token.
func (c *fencedClient) write(ctx context.Context, w Write) error {
	b, _ := json.Marshal(w)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url+"/write", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusConflict:
		return ErrFenced
	}
	return fmt.Errorf("chaos: fenced store: %s", resp.Status)
}
