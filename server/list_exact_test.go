package server

import (
	"context"
	"testing"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// An exact listing names one resource: not the others of its prefix.
func TestListExact(t *testing.T) {
	s := startServer(t, Config{})
	r, _ := open(t, s, 0, 10*time.Second)
	r.granted(r.lock("x", dlmpb.Mode_MODE_EX))
	r.granted(r.lock("x/1", dlmpb.Mode_MODE_EX))
	c := dialPB(t, s.Addr())
	for prefix, want := range map[string][]string{"x": {"x"}, "x/": nil, "x/1": {"x/1"}, "y": nil} {
		resp, err := c.List(context.Background(), &dlmpb.ListRequest{Prefix: prefix, Exact: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ri := range resp.GetResources() {
			got = append(got, ri.GetName())
		}
		if len(got) != len(want) || (len(want) == 1 && got[0] != want[0]) || resp.GetNext() != "" {
			t.Fatalf("exact %q: %v next %q, want %v", prefix, got, resp.GetNext(), want)
		}
	}
}
