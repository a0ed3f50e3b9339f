package dlmserver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// TestFullDiskRefusesWithErrStorage: a dlm server whose disk fills (a
// tmpfs, with the smallest log segments) fails the store's calls with
// ErrStorage, which matches dlm.ErrUnavailable and names the cause, also
// when the node, unable to commit, loses its leadership and the session
// with it (the session's loss says why); a lock the server granted before
// stays held unless its loss was reported; once space returns the store
// acquires again.
func TestFullDiskRefusesWithErrStorage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	disk := t.TempDir()
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, fmt.Sprintf("size=%d", 8<<20)); err != nil {
		t.Skipf("cannot mount a tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(disk, syscall.MNT_DETACH) })
	srv := testenv.StartDLM(t, bin, "-data", filepath.Join(disk, "data"), "-log-segment-size", "65536")
	s := dial(t, srv.Addr(), dlmserver.WithSessionTTL(2*time.Second))
	ctx := storetest.Context(t)
	name := storetest.Resource(t)

	held, err := s.Acquire(ctx, request(name+"-held", driver.EX))
	if err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(disk, "filler")
	if err := testenv.Fill(filler); err != nil {
		t.Fatal(err)
	}

	// The server grants while its segment has room, then refuses.
	var refused error
	for i := range 10000 {
		req := request(fmt.Sprintf("%s-%d", name, i), driver.EX)
		req.Metadata = strings.Repeat("m", 900)
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		g, err := s.Acquire(actx, req)
		cancel()
		if err != nil {
			refused = err
			break
		}
		if err := s.Release(ctx, req, g); err != nil {
			refused = err
			break
		}
	}
	if !errors.Is(refused, dlmserver.ErrStorage) || !errors.Is(refused, dlm.ErrUnavailable) ||
		!strings.Contains(refused.Error(), "no space left on device") {
		t.Fatalf("on a full disk: %v; want ErrStorage, matching dlm.ErrUnavailable, naming the cause", refused)
	}
	t.Logf("on a full disk: %v", refused)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	// The node recovers by itself; until it does the store keeps
	// answering ErrStorage.
	var g driver.Grant
	req := request(name+"-after", driver.EX)
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		g, err = s.Acquire(actx, req)
		cancel()
		if err == nil {
			break
		}
		if !errors.Is(err, dlm.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("after space returned: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // the node offers no event to wait on
	}
	if err := s.Release(ctx, req, g); err != nil {
		t.Fatal(err)
	}
	// The lock granted before the disk filled: held still, or, if the
	// session was lost meanwhile, its loss reported to its holder.
	select {
	case <-held.Lost:
		t.Log("the session was lost while the disk was full: the earlier lock's loss was reported")
	default:
		l := newLister(t, srv.Addr())
		if h := l.resource(name + "-held").GetHolders(); len(h) != 1 || h[0].GetToken() != held.Token {
			t.Fatalf("the lock granted before the disk filled, not reported lost: holders %v, want it (token %d)", h, held.Token)
		}
	}
}
