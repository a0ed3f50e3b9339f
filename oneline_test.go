package dlm

import "testing"

func TestOneLineJoinsLines(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"plain", "plain"},
		{"failed to connect to `user=u`:\n\taddr a: refused\n\taddr b: refused", "failed to connect to `user=u`: addr a: refused; addr b: refused"},
		{"first\nsecond\n\n", "first; second"},
		{"  padded  \n", "padded"},
	} {
		if got := oneLine(tc.in); got != tc.want {
			t.Errorf("oneLine(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
