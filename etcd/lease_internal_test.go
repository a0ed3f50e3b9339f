package etcd

import (
	"testing"
	"time"
)

func TestLeaseSeconds(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want int64
	}{
		{time.Nanosecond, 1},
		{10 * time.Millisecond, 1},
		{time.Second, 1},
		{time.Second + time.Nanosecond, 2},
		{2500 * time.Millisecond, 3},
		{24 * time.Hour, 86400},
	} {
		if got := leaseSeconds(tc.ttl); got != tc.want {
			t.Errorf("leaseSeconds(%s) = %d, want %d", tc.ttl, got, tc.want)
		}
	}
}
