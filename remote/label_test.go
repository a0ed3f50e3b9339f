package remote_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/remote"
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
		s, err := remote.Dial(ctx, shared.Addr(), remote.WithLabel(label))
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
