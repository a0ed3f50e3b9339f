package redislua_test

import (
	"strings"
	"testing"

	"github.com/dlmhq/dlm/internal/redislua"
)

// hashTag returns what Redis Cluster hashes for key: the text between the
// first '{' and the next '}', when non-empty; otherwise the whole key.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func TestKeysOfOneLockShareASlot(t *testing.T) {
	for _, name := range []string{"a", "}", "}a", "a}b", "{x}", "{}", "100%", "%7D", "ü/ß"} {
		k := redislua.KeysFor("dlm:", name, "0123")
		tag := hashTag(k.Lock)
		for _, other := range []string{k.Fence, k.Queue, k.Live, k.Wake, k.WakeBase + "ffff", k.Label, k.Watch} {
			if got := hashTag(other); got != tag {
				t.Errorf("%q: key %q hashes %q, the lock key %q hashes %q", name, other, got, k.Lock, tag)
			}
		}
		if tag == k.Lock {
			t.Errorf("%q: lock key %q has no hash tag", name, k.Lock)
		}
	}
	// The escaping is one-to-one.
	if redislua.Escape("}") == redislua.Escape("%7D") {
		t.Error("escape maps two names to one key")
	}
}
