package auth

import (
	"strings"
	"testing"
)

// docs/security.md promises that certificate common names with spaces are
// identities that only "*" rules match: such a client is authenticated,
// not refused.
func TestAuthCertCommonNameWithSpaces(t *testing.T) {
	a := &Authenticator{certs: true, rules: AllowAll()}
	id, how, err := a.identify(nil, func() (string, bool) { return "Carol Smith", true })
	if err != nil || id != "Carol Smith" {
		t.Fatalf("CN with a space: identity %q, %v (%s)", id, err, how)
	}
	for _, bad := range []string{"", "*", " carol", "carol ", "caról", "a\tb", strings.Repeat("x", MaxIdentityBytes+1)} {
		if _, _, err := a.identify(nil, func() (string, bool) { return bad, true }); err == nil {
			t.Errorf("CN %q accepted", bad)
		}
	}
}
