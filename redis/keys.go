package redis

import (
	"strconv"
	"strings"

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

// keysOf returns the lock key of resource followed by that key with each
// suffix, built in one allocation (and one for the slice).
func (s *Store) keysOf(resource string, suffixes ...string) []string {
	name := redislua.Escape(resource)
	n := len(s.prefix) + len(name) + 2
	size := n * (1 + len(suffixes))
	for _, x := range suffixes {
		size += len(x)
	}
	var b strings.Builder
	b.Grow(size)
	keys := make([]string, 1+len(suffixes))
	for i := range keys {
		start := b.Len()
		b.WriteString(s.prefix)
		b.WriteByte('{')
		b.WriteString(name)
		b.WriteByte('}')
		if i > 0 {
			b.WriteString(suffixes[i-1])
		}
		keys[i] = b.String()[start:]
	}
	return keys
}

// ms formats a duration in whole milliseconds as the scripts take it.
func ms(n int64) string { return strconv.FormatInt(n, 10) }
