package redislua

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"
)

// Listing: read-only helpers for the stores' driver.Lister. A listing first
// scans the keyspace for the lock and queue keys of the resources asked for
// (ScanNames), then reads what it shows of each resource with one script
// per resource, pipelined (ReadResources).

// ReadResource reads one resource atomically, without writing: the lock's
// value and PTTL, the token counter, the node's clock, the label of the
// last relabel (redlock), and the queue's live waiters (those whose
// liveness deadline, by the node's clock, has not passed), first in line
// first. KEYS: lock, fence, queue, live, label. Returns {value or nil,
// pttl, counter or nil, clock in µs, label or nil, waiter...}.
var ReadResource = goredis.NewScript(`
local t = redis.call('TIME')
local res = {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  t[1] .. string.format('%06d', tonumber(t[2])), redis.call('GET', KEYS[5])}
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, w in ipairs(redis.call('LRANGE', KEYS[3], 0, -1)) do
  local dl = redis.call('ZSCORE', KEYS[4], w)
  if dl and tonumber(dl) > nowms then res[#res + 1] = w end
end
return res
`)

// readKeys are the keys ReadResource reads.
func (k Keys) readKeys() []string { return []string{k.Lock, k.Fence, k.Queue, k.Live, k.Label} }

// scanCount is the COUNT hint of each SCAN call.
const scanCount = 1000

// Resource is what one Redis node holds of one resource.
type Resource struct {
	// Name is the resource's name.
	Name string
	// Owner is the holder's owner id, "" when the lock is free.
	Owner string
	// Metadata is the holder's metadata.
	Metadata string
	// TTL is the lock key's time to live; 0 when free or without expiry.
	TTL time.Duration
	// Token is the resource's token counter, the holder's token while the
	// lock is held (0 once the counter key has expired).
	Token uint64
	// Since is when the holder was granted the lock. Dated: the grant's
	// time written in the lock value (the granting caller's clock), zero
	// for a value without one. Plain: read from Token, which redlock's
	// acquire script floors at the node's clock in microseconds: that
	// clock at the grant, or later than the grant if the clock had
	// stepped back (or grants came faster than one a microsecond); zero
	// when Token is not a past reading of the node's clock.
	Since time.Time
	// Version is the version of the holder's last relabel recorded in the
	// label key (redlock), 0 for none; Metadata is then that relabel's.
	Version uint64
	// Waiters are the owners of the live waiters, first in line first.
	Waiters []string
}

// Empty reports whether the node holds neither a lock nor a live waiter of
// the resource.
func (r Resource) Empty() bool { return r.Owner == "" && len(r.Waiters) == 0 }

// ListPattern returns the SCAN MATCH pattern of every key of the resources
// whose names start with namePrefix, under the store's key prefix: the
// glob metacharacters of both are escaped.
func ListPattern(prefix, namePrefix string) string {
	return globEscape(prefix+"{"+Escape(namePrefix)) + "*"
}

// globEscape escapes the characters that Redis's glob matching treats as
// special, so that s matches only itself.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

var unescaper = strings.NewReplacer("%7D", "}", "%25", "%")

// Unescape reverses Escape.
func Unescape(tag string) string {
	if !strings.Contains(tag, "%") {
		return tag
	}
	return unescaper.Replace(tag)
}

// nameOf returns the resource whose lock or queue key is key, under prefix,
// and false for any other key (token counters, wake-up lists, foreign
// keys, and keys whose tag Escape would not have written, such as {%}).
func nameOf(prefix, key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, prefix+"{")
	if !ok {
		return "", false
	}
	tag, suffix, ok := strings.Cut(rest, "}")
	if !ok || (suffix != "" && suffix != ":queue") {
		return "", false
	}
	name := Unescape(tag)
	if Escape(name) != tag {
		return "", false
	}
	return name, true
}

// ScanNames returns the names, sorted and without repeats, of the
// resources under the key prefix whose names start with namePrefix and
// that have a lock key or a queue key on rdb. It walks the whole keyspace
// with SCAN and a MATCH pattern, never KEYS; on a Cluster or a Ring it
// scans every master or shard. each, when positive, bounds every SCAN call.
func ScanNames(ctx context.Context, rdb goredis.UniversalClient, prefix, namePrefix string, each time.Duration) ([]string, error) {
	pattern := ListPattern(prefix, namePrefix)
	var mu sync.Mutex
	seen := make(map[string]struct{})
	scan := func(ctx context.Context, c goredis.Cmdable) error {
		var cursor uint64
		for {
			cctx, cancel := bound(ctx, each)
			keys, next, err := c.Scan(cctx, cursor, pattern, scanCount).Result()
			cancel()
			if err != nil {
				return err
			}
			mu.Lock()
			for _, k := range keys {
				if name, ok := nameOf(prefix, k); ok && strings.HasPrefix(name, namePrefix) {
					seen[name] = struct{}{}
				}
			}
			mu.Unlock()
			if next == 0 {
				return nil
			}
			cursor = next
		}
	}
	var err error
	switch c := rdb.(type) {
	case *goredis.ClusterClient:
		err = c.ForEachMaster(ctx, func(ctx context.Context, shard *goredis.Client) error { return scan(ctx, shard) })
	case *goredis.Ring:
		err = c.ForEachShard(ctx, func(ctx context.Context, shard *goredis.Client) error { return scan(ctx, shard) })
	default:
		err = scan(ctx, rdb)
	}
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(seen))
	for name := range seen {
		names = append(names, name)
	}
	slices.Sort(names)
	return names, nil
}

// Layout is how a store writes a lock's value.
type Layout int

const (
	// Plain is owner (32 hex) followed by metadata: redlock's.
	Plain Layout = iota
	// Dated is owner, the queue mark, the grant's time (GrantTime),
	// metadata: the redis store's.
	Dated
)

// ReadResources reads names (under the key prefix) from rdb with
// ReadResource, in one pipeline, and returns what it found in the same
// order, each lock value read as layout: a resource that is gone is Empty.
// each, when positive, bounds each pipeline.
func ReadResources(ctx context.Context, rdb goredis.UniversalClient, layout Layout, prefix string, names []string, each time.Duration) ([]Resource, error) {
	keys := make([][]string, len(names))
	for i, name := range names {
		keys[i] = KeysFor(prefix, name, "").readKeys()
	}
	cmds, err := readPipelined(ctx, rdb, keys, each, ReadResource.EvalSha)
	if err != nil {
		return nil, err
	}
	// Scripts are gone after a restart or SCRIPT FLUSH: send the missing
	// ones whole, which also caches them.
	var again []int
	for i, c := range cmds {
		if noScript(c.Err()) {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		sub := make([][]string, len(again))
		for j, i := range again {
			sub[j] = keys[i]
		}
		evals, err := readPipelined(ctx, rdb, sub, each, ReadResource.Eval)
		if err != nil {
			return nil, err
		}
		for j, i := range again {
			cmds[i] = evals[j]
		}
	}
	out := make([]Resource, len(names))
	for i, c := range cmds {
		reply, err := c.Slice()
		if err != nil {
			return nil, err
		}
		r, err := parseResource(layout, names[i], reply)
		if err != nil {
			return nil, err
		}
		out[i] = r
	}
	return out, nil
}

// readPipelined sends one script call per entry of keys in one pipeline.
// It returns an error only when the pipeline as a whole failed; each
// command carries its own.
func readPipelined(ctx context.Context, rdb goredis.UniversalClient, keys [][]string, each time.Duration,
	run func(context.Context, goredis.Scripter, []string, ...any) *goredis.Cmd,
) ([]*goredis.Cmd, error) {
	ctx, cancel := bound(ctx, each)
	defer cancel()
	pipe := rdb.Pipeline()
	cmds := make([]*goredis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = run(ctx, pipe, k)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		// Exec reports the first failed command; only a failure that
		// is not a script's own (the connection, the context) ends the
		// read here.
		var rerr goredis.Error
		if !errors.As(err, &rerr) {
			return nil, err
		}
	}
	return cmds, nil
}

// ReadOne reads the resource name (under the key prefix) from rdb with
// ReadResource, its lock value read as layout; a resource that is gone is
// Empty. each, when positive, bounds the call.
func ReadOne(ctx context.Context, rdb goredis.Scripter, layout Layout, prefix, name string, each time.Duration) (Resource, error) {
	ctx, cancel := bound(ctx, each)
	defer cancel()
	reply, err := ReadResource.Run(ctx, rdb, KeysFor(prefix, name, "").readKeys()).Slice()
	if err != nil {
		return Resource{}, err
	}
	return parseResource(layout, name, reply)
}

// minClockToken is the smallest token read as a clock: 10^15 µs is
// September 2001, before any token the acquire scripts floored at a clock.
const minClockToken = 1e15

// maxPTTL is the longest PTTL, in ms, that a time.Duration holds.
const maxPTTL = int64(math.MaxInt64 / time.Millisecond)

// readLen is the length of a ReadResource reply before its waiters.
const readLen = 5

// parseResource reads a ReadResource reply, the lock value as layout. A
// Dated value without a stamp (written before the layout had one) reads as
// Plain's, with no Since.
func parseResource(layout Layout, name string, reply []any) (Resource, error) {
	r := Resource{Name: name}
	if len(reply) < readLen {
		return r, errors.New("redis read: short reply from the read script")
	}
	if cur, ok := reply[0].(string); ok {
		r.Owner = cur[:min(len(cur), 32)]
		r.Metadata = cur[len(r.Owner):]
		if layout == Dated {
			r.Since, r.Metadata = parseStamp(r.Metadata)
		}
		if pttl, _ := reply[1].(int64); pttl > 0 && pttl <= maxPTTL {
			r.TTL = time.Duration(pttl) * time.Millisecond
		}
		if fence, ok := reply[2].(string); ok {
			r.Token, _ = strconv.ParseUint(fence, 10, 64)
		}
		if layout == Plain {
			clock, _ := reply[3].(string)
			if now, err := strconv.ParseUint(clock, 10, 64); err == nil && r.Token >= minClockToken && r.Token <= now {
				r.Since = time.UnixMicro(int64(r.Token))
			}
		}
		if label, ok := reply[4].(string); ok && len(r.Owner) == 32 {
			r.Version, r.Metadata = relabelled(label, r.Owner, r.Metadata)
		}
	}
	for _, w := range reply[readLen:] {
		if s, ok := w.(string); ok {
			r.Waiters = append(r.Waiters, s)
		}
	}
	return r, nil
}

// relabelled returns the version and metadata of label when it records a
// relabel by owner, and 0 and metadata otherwise.
func relabelled(label, owner, metadata string) (uint64, string) {
	const head = 32 + LabelVersionDigits
	if len(label) < head || label[:32] != owner {
		return 0, metadata
	}
	v, err := strconv.ParseUint(label[32:head], 10, 64)
	if err != nil {
		return 0, metadata
	}
	return v, label[head:]
}

// LabelVersion formats a relabel's version for RedlockRelabel.
func LabelVersion(v uint64) string { return fmt.Sprintf("%0*d", LabelVersionDigits, v) }

// bound returns ctx bounded by d when d is positive.
func bound(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return ctx, func() {}
}

func noScript(err error) bool {
	return err != nil && (errors.Is(err, goredis.ErrNoScript) || goredis.HasErrorPrefix(err, "NOSCRIPT"))
}
