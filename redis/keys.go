package redis

import (
	"strconv"

	"github.com/dlmhq/dlm/internal/redislua"
)

// The store's keys of one resource R, as redislua.KeysFor lays them out:
// the lock key <prefix>{R} and the suffixes of the others. Each call
// builds only the keys its script takes (the scripts build the wake-up
// keys themselves, from the lock key).
const (
	fenceSuffix = ":fence"
	queueSuffix = ":queue"
	liveSuffix  = ":live"
	wakeSuffix  = ":wake:"
	watchSuffix = ":watch" // a pub/sub channel, not a key
)

// lockKey returns the lock key of resource, which the other keys extend.
func (s *Store) lockKey(resource string) string {
	return s.prefix + "{" + redislua.Escape(resource) + "}"
}

// ms formats a duration in whole milliseconds as the scripts take it.
func ms(n int64) string { return strconv.FormatInt(n, 10) }
