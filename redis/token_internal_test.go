package redis

import (
	"errors"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

// A reply's token is a grant only when positive: a zero (a counter that
// is gone, or a reply that was not an integer) or a negative one is the
// store failing, not a grant with a token below those issued before.
func TestTokenGrantRefusesNonPositive(t *testing.T) {
	for _, tok := range []int64{0, -1} {
		if _, _, _, err := tokenGrant(tok, 0); !errors.Is(err, driver.ErrUnavailable) {
			t.Fatalf("token %d: %v, want ErrUnavailable", tok, err)
		}
	}
	g, _, _, err := tokenGrant(7, 1)
	if err != nil || g.Token != 7 {
		t.Fatalf("token 7: %+v, %v", g, err)
	}
}
