package auth

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestParseTokens(t *testing.T) {
	const good = "# tokens\n\nalice  0123456789abcdef-alice\n\tbob\t0123456789abcdef-bob  \nalice 0123456789abcdef-alice2\n"
	toks, err := ParseTokens(strings.NewReader(good))
	if err != nil {
		t.Fatal(err)
	}
	if toks.Len() != 3 {
		t.Fatalf("%d tokens, want 3", toks.Len())
	}
	for tok, want := range map[string]string{"0123456789abcdef-alice": "alice", "0123456789abcdef-alice2": "alice", "0123456789abcdef-bob": "bob"} {
		if id, ok := toks.Identity(tok); !ok || id != want {
			t.Errorf("Identity(%q) = %q, %v; want %q", tok, id, ok, want)
		}
	}
	for _, tok := range []string{"", "0123456789abcdef", "0123456789abcdef-alic", "0123456789abcdef-alice "} {
		if id, ok := toks.Identity(tok); ok {
			t.Errorf("Identity(%q) = %q", tok, id)
		}
	}

	const secret = "0123456789abcdef-secret"
	bad := map[string]string{
		"duplicate token":       "a " + secret + "\nb " + secret + "\n",
		"short token":           "a short\n",
		"one field":             "alice\n",
		"three fields":          "alice " + secret + " extra\n",
		"reserved identity":     "* " + secret + "\n",
		"non-ASCII identity":    "alicé " + secret + "\n",
		"non-printable token":   "a " + secret + "\x01\n",
		"long identity":         strings.Repeat("i", MaxIdentityBytes+1) + " " + secret + "\n",
		"long token":            "a " + strings.Repeat("t", MaxTokenBytes+1) + "\n",
		"empty file":            "# nothing\n",
		"file over the maximum": strings.Repeat("# padding padding padding\n", MaxAuthFileBytes/26+1),
	}
	for name, content := range bad {
		_, err := ParseTokens(strings.NewReader(content))
		if !errors.Is(err, ErrAuthConfig) {
			t.Errorf("%s: err %v, want ErrAuthConfig", name, err)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "short\n") {
			t.Errorf("%s: the error quotes the token: %v", name, err)
		}
	}
	if _, err := LoadTokens(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrAuthConfig) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestParseRules(t *testing.T) {
	r, err := ParseRules(strings.NewReader(`
# identity permission prefix
alice lock  jobs/
alice lock  jobs/nightly/
alice list  "jobs/with space/"
alice list  *x
*     list  public/
ops   admin *
*     lock  ""
bob   lock  *
`))
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		id   string
		p    Permission
		name string
		want bool
	}{
		{"alice", PermissionLock, "jobs/a", true},
		{"alice", PermissionLock, "jobs", true}, // the empty prefix of "*" lock ""
		{"alice", PermissionList, "jobs/with space/x", true},
		{"alice", PermissionList, "*xy", true},
		{"alice", PermissionList, "public/p", true},
		{"alice", PermissionList, "jobs/a", false},
		{"alice", PermissionAdmin, "", false},
		{"ops", PermissionAdmin, "", true},
		{"ops", PermissionList, "public/", true},
		{"ops", PermissionList, "other", false},
		{"nobody", PermissionList, "public/1", true},
		{"nobody", PermissionList, "private", false},
		{"bob", PermissionLock, "anything", true},
	}
	for _, c := range cases {
		if got := r.Allows(c.id, c.p, c.name); got != c.want {
			t.Errorf("Allows(%s, %s, %q) = %v", c.id, c.p, c.name, got)
		}
	}
	if got := r.Prefixes("alice", PermissionList); !slices.Equal(got, []string{"*x", "jobs/with space/", "public/"}) {
		t.Errorf("alice's list prefixes %q", got)
	}
	if got := r.Prefixes("alice", PermissionLock); !slices.Equal(got, []string{""}) {
		t.Errorf("alice's lock prefixes %q, want [\"\"] (every name)", got)
	}

	bad := map[string]string{
		"unknown permission": "alice write jobs/\n",
		"missing prefix":     "alice lock\n",
		"admin with prefix":  "ops admin jobs/\n",
		"unquoted space":     "alice lock jobs/ x\n",
		"bad quoting":        "alice lock \"jobs/\n",
		"bad identity":       "al\x01ce lock jobs/\n",
		"long prefix":        "alice lock " + strings.Repeat("p", MaxRulePrefixBytes+1) + "\n",
		"too many rules":     strings.Repeat("alice lock jobs/\n", MaxRules+1),
	}
	for name, content := range bad {
		if _, err := ParseRules(strings.NewReader(content)); !errors.Is(err, ErrAuthConfig) {
			t.Errorf("%s: err %v, want ErrAuthConfig", name, err)
		}
	}
	if _, err := LoadRules(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, ErrAuthConfig) {
		t.Errorf("missing file: %v", err)
	}
}

func TestNormalizePrefixes(t *testing.T) {
	got := normalizePrefixes([]string{"b/", "a/x", "a/", "c", "cd", "a/"})
	if want := []string{"a/", "b/", "c"}; !slices.Equal(got, want) {
		t.Fatalf("normalizePrefixes = %q, want %q", got, want)
	}
	if got := normalizePrefixes([]string{"x", ""}); !slices.Equal(got, []string{""}) {
		t.Fatalf("with the empty prefix: %q", got)
	}
}
