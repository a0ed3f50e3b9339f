package locktable

import (
	"strings"
	"testing"

	"github.com/dlmhq/dlm/driver"
)

func TestResourcesMatching(t *testing.T) {
	tb := New(Limits{})
	st := Stamp{Index: 1, Now: 1}
	if err := tb.OpenSession(st, 1, "s"); err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"a/1", "a/2", "b/1", "b/2", "c"} {
		st.Index++
		if _, err := tb.Lock(st, LockRequest{Session: 1, Owner: OwnerID(i + 1), Resource: name, Mode: driver.PR}); err != nil {
			t.Fatal(err)
		}
	}
	names := func(rs []ResourceInfo) string {
		var out []string
		for _, r := range rs {
			out = append(out, r.Name)
		}
		return strings.Join(out, ",")
	}
	notB := func(n string) bool { return !strings.HasPrefix(n, "b/") }
	for _, c := range []struct {
		prefix, after string
		limit         int
		keep          func(string) bool
		want          string
	}{
		{"", "", 0, nil, "a/1,a/2,b/1,b/2,c"},
		{"", "", 0, notB, "a/1,a/2,c"},
		{"", "a/1", 2, notB, "a/2,c"},
		{"b/", "", 0, notB, ""},
		{"a/", "", 1, notB, "a/1"},
	} {
		if got := names(tb.ResourcesMatching(c.prefix, c.after, c.limit, c.keep)); got != c.want {
			t.Errorf("ResourcesMatching(%q, %q, %d) = %s, want %s", c.prefix, c.after, c.limit, got, c.want)
		}
	}
}
