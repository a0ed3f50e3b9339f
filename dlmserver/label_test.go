package dlmserver_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
)

// A session label the server would refuse (not UTF-8, control or
// bidirectional formatting characters) fails Dial at once with ErrInvalid
// naming the character, instead of retrying until ctx ends.
func TestBadLabelIsInvalid(t *testing.T) {
	for label, want := range map[string]string{
		"nul\x00":   "U+0000 at byte 3",
		"rlo\u202E": "U+202E at byte 3",
		"bad\xff":   "byte 3 (0xff) is not valid UTF-8",
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		s, err := dlmserver.Dial(ctx, shared.Addr(), dlmserver.WithLabel(label))
		cancel()
		if err == nil {
			s.Close(context.Background())
			t.Fatalf("Dial with label %q: no error", label)
		}
		if !errors.Is(err, dlm.ErrInvalid) || errors.Is(err, dlm.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("Dial with label %q: %v, want ErrInvalid only, saying %q", label, err, want)
		}
	}
}

// A store dialed without WithLabel names its program, host and pid, which
// the server shows in listings.
func TestDefaultLabelNamesHostAndPid(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := dlmserver.Dial(ctx, shared.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(context.Background())
	name := "default-label/" + t.Name()
	lease, err := dlm.New(s).Acquire(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	defer lease.Release(context.Background())
	res, err := s.List(ctx, name, 1)
	if err != nil || len(res) != 1 || len(res[0].Holders) != 1 {
		t.Fatalf("List: %+v, %v", res, err)
	}
	host, _ := os.Hostname()
	want := fmt.Sprintf("%s (%s pid %d)", filepath.Base(os.Args[0]), host, os.Getpid())
	if got := res[0].Holders[0].SessionLabel; got != want {
		t.Errorf("default session label %q, want %q", got, want)
	}
}
