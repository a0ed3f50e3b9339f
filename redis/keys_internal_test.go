package redis

import (
	"fmt"
	"testing"

	"github.com/dlmhq/dlm/internal/redislua"
)

// The keys the store builds are those of the shared layout, which Inspect
// and List read.
func TestKeysFollowTheLayout(t *testing.T) {
	s := New(nil, WithPrefix("p:"))
	for _, name := range []string{"a", "}", "a}b", "100%", "{x}"} {
		const owner = "0123456789abcdef0123456789abcdef"
		want := redislua.KeysFor("p:", name, owner)
		lock := s.lockKey(name)
		got := redislua.Keys{
			Lock: lock, Fence: lock + fenceSuffix, Queue: lock + queueSuffix, Live: lock + liveSuffix,
			WakeBase: lock + wakeSuffix, Wake: lock + wakeSuffix + owner, Label: want.Label,
			Watch: lock + watchSuffix,
		}
		if got != want {
			t.Errorf("%q: the store's keys are %+v, the layout's %+v", name, got, want)
		}
		built := s.keysOf(name, fenceSuffix, queueSuffix, liveSuffix)
		if fmt.Sprint(built) != fmt.Sprint([]string{want.Lock, want.Fence, want.Queue, want.Live}) {
			t.Errorf("%q: keysOf built %q", name, built)
		}
	}
}
