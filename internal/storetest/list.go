package storetest

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/dlmhq/dlm/driver"
)

// OwnerID matches an owner id as package dlm makes them: 32 lower-case hex
// digits.
var OwnerID = regexp.MustCompile(`^[0-9a-f]{32}$`)

// List lists through l (within 20 s) and fails the test on an error.
func List(t testing.TB, l driver.Lister, prefix string, limit int) []driver.ResourceInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	infos, err := l.List(ctx, prefix, limit)
	if err != nil {
		t.Fatalf("List(%q, %d): %v", prefix, limit, err)
	}
	return infos
}

// Listed returns the listing of the resource name alone, with ok false if
// it is not listed.
func Listed(t testing.TB, l driver.Lister, name string) (driver.ResourceInfo, bool) {
	t.Helper()
	for _, r := range List(t, l, name, 1000) {
		if r.Resource == name {
			return r, true
		}
	}
	return driver.ResourceInfo{}, false
}

// Names returns the resource names of a listing, in order.
func Names(infos []driver.ResourceInfo) []string {
	out := make([]string, len(infos))
	for i, r := range infos {
		out[i] = r.Resource
	}
	return out
}
