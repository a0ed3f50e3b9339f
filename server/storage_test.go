package server

import (
	"io"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/server/internal/servertest"
	"github.com/dlmhq/dlm/server/raftnode"
)

// get returns the status and body of GET url.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestFullDiskRefusesWithReasonStorageAndRecovers: while a durable node's
// log cannot be written (ENOSPC, injected at the store), a client's
// Acquire is refused with REASON_STORAGE naming the cause, /readyz and
// /metrics say so, the logs stay bounded, and once writes succeed the
// node grants again with the lock it acknowledged before still held.
func TestFullDiskRefusesWithReasonStorageAndRecovers(t *testing.T) {
	var fault atomic.Pointer[error]
	var logs servertest.LogBuffer
	s := startServer(t, Config{Logger: logs.Logger(), Node: raftnode.Config{Dir: t.TempDir(),
		StorageFault: func(store, _ string) error {
			if p := fault.Load(); p != nil && store == raftnode.StoreLog {
				return *p
			}
			return nil
		}}})
	ctx := testCtx(t)
	c := locksClient(t, s)
	h := openUnary(t, ctx, c, 30*time.Second)
	held, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: h, Resource: "before"})
	if err != nil {
		t.Fatal(err)
	}

	enospc := error(&os.PathError{Op: "write", Path: "wal", Err: syscall.ENOSPC})
	fault.Store(&enospc)
	for range 3 { // the proposal that fails, then the node that does not serve
		var trailer metadata.MD
		_, err = c.Acquire(ctx, &dlmpb.AcquireRequest{Session: h, Resource: "during"}, grpc.Trailer(&trailer))
		if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "no space left on device") {
			t.Fatalf("acquire on a full disk: %v", err)
		}
		if got := trailer.Get(ReasonHeader); len(got) != 1 || got[0] != "REASON_STORAGE" {
			t.Fatalf("reason trailer %v (%v)", got, err)
		}
	}
	code, body := get(t, "http://"+s.HTTPAddr()+"/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "not ready: the log cannot be written: no space left on device") {
		t.Fatalf("/readyz: %d %q", code, body)
	}
	if _, m := get(t, "http://"+s.HTTPAddr()+"/metrics"); !strings.Contains(m, "\ndlm_server_storage_failing 1\n") {
		t.Fatal("/metrics does not say the storage fails")
	}
	// Raft steps down and fails again over and over: the lines stay few.
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for f, _ := s.Node().StorageFailure(); f.Count < 30; f, _ = s.Node().StorageFailure() {
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for 30 failed writes: %v", ctx.Err())
		case <-tick.C:
		}
	}
	if lines := logs.Count("") - logs.Count("level=DEBUG"); lines > 80 {
		t.Fatalf("%d log lines after %d failed writes:\n%s", lines, s.Node().StorageFailures(), logs.String())
	}
	if n := logs.Count("barrier failed"); n > 2 {
		t.Fatalf("the barrier's failure is logged %d times", n)
	}

	fault.Store(nil)
	if err := s.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, &dlmpb.AcquireRequest{Session: h, Resource: "after"}); err != nil {
		t.Fatalf("acquire once the disk writes: %v", err)
	}
	if code, _ := get(t, "http://"+s.HTTPAddr()+"/readyz"); code != http.StatusOK {
		t.Fatalf("/readyz after recovery: %d", code)
	}
	list, err := c.List(ctx, &dlmpb.ListRequest{Prefix: "before"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.GetResources()) != 1 || len(list.GetResources()[0].GetHolders()) != 1 ||
		list.GetResources()[0].GetHolders()[0].GetToken() != held.GetToken() {
		t.Fatalf("the lock acknowledged before the failure: %v", list)
	}
}
