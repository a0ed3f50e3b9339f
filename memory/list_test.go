package memory_test

import (
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/internal/storetest"
)

func TestListHolderAndWaitersInOrder(t *testing.T) {
	c, s := newClient(t)
	start := time.Now()
	storetest.ListQueue(t, storetest.ListedQueue{
		Holder: c, Lister: s,
		OwnerIDs: true, Tokens: true, MaxTTL: storetest.ListTTL, Since: true,
		Metadata: "the holder",
		CheckHolder: func(t *testing.T, h driver.HolderInfo, _ *dlm.Lease) {
			if h.Permits != 0 || h.Since.Before(start.Add(-time.Millisecond)) || h.Since.After(time.Now()) {
				t.Fatalf("holder = %+v, want no permits, granted since %s", h, start)
			}
		},
	})
}

func TestListConversionAndSemaphore(t *testing.T) {
	c, s := newClient(t)
	storetest.ListConversionAndSemaphore(t, c, s, nil)
}

func TestListPrefixAndLimit(t *testing.T) {
	c, s := newClient(t)
	storetest.ListPrefixAndLimit(t, c, s, []string{"a", "a/b", "a/c", "a*", "b"}, []storetest.ListQuery{
		{Prefix: "", Limit: 100},
		{Prefix: "", Limit: 2},
		{Prefix: "a/", Limit: 100},
		{Prefix: "a/", Limit: 1},
		{Prefix: "c", Limit: 100},
	})
}

func TestListErrors(t *testing.T) {
	_, s := newClient(t)
	storetest.ListErrors(t, s, func() driver.Lister {
		s.Close()
		return s
	})
}
