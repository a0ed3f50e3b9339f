package redislua

import (
	"strconv"
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"
)

// FuzzNameOf: the keys of a resource give its name back (the lock and queue
// keys; the others no name), and a key that gives a name is one of that
// resource's keys, so that a listing never reports a name whose keys it
// would not read.
func FuzzNameOf(f *testing.F) {
	for _, s := range []string{"a", "}", "}a", "a}b", "{x}", "{}", "100%", "%7D", "%257D", "ü/ß", "a:queue", ""} {
		f.Add("dlm:", s, "dlm:{"+s+"}")
	}
	f.Add("", "x", "{%}")
	f.Add("p{", "x", "p{{%7d}:queue")
	f.Fuzz(func(t *testing.T, prefix, name, key string) {
		k := KeysFor(prefix, name, "0123")
		for _, key := range []string{k.Lock, k.Queue} {
			if got, ok := nameOf(prefix, key); !ok || got != name {
				t.Fatalf("nameOf(%q, %q) = %q, %v; want %q", prefix, key, got, ok, name)
			}
		}
		for _, key := range []string{k.Fence, k.Live, k.Wake, k.WakeBase, k.Label, k.Watch} {
			if got, ok := nameOf(prefix, key); ok {
				t.Fatalf("nameOf(%q, %q) = %q: not a lock or queue key", prefix, key, got)
			}
		}
		if got, ok := nameOf(prefix, key); ok {
			if k := KeysFor(prefix, got, ""); key != k.Lock && key != k.Queue {
				t.Fatalf("nameOf(%q, %q) = %q, whose keys are %q and %q", prefix, key, got, k.Lock, k.Queue)
			}
		}
	})
}

// FuzzParseResource: a read script's reply of any shape (strings, integers,
// nil, nested arrays, errors, as go-redis decodes them), in either layout,
// is read without a panic: a short one is an error; otherwise the owner is
// at most the 32 bytes of the lock's value, the metadata the rest (after
// the queue mark and the grant's time, when Dated and the value has them)
// unless a label of the same owner has a version, the TTL never negative,
// Since (Plain) never after the clock, and the waiters are the strings
// after the fifth element.
func FuzzParseResource(f *testing.F) {
	f.Add("r", false, []byte("s\x00i\x01s\x02s\x09s\x0as\x03s\x04"))
	f.Add("r", false, []byte("s\x02i\x01s\x09s\x0as\x0bs\x03"))
	f.Add("r", false, []byte("n\x00i\x00n\x00n\x00n\x00"))
	f.Add("r", false, []byte("s\x05i\x09s\x06a\x00e\x00s\x03"))
	f.Add("", false, []byte("s"))
	f.Add("r", true, []byte("s\x0ci\x01s\x09s\x0as\x0bs\x03"))
	f.Add("r", true, []byte("s\x02i\x01s\x09s\x0an\x00"))
	f.Add("r", true, []byte("s\x0di\x01s\x09s\x0as\x0bs\x03"))
	f.Add("r", true, []byte("s\x0ei\x01s\x09s\x0an\x00"))
	f.Fuzz(func(t *testing.T, name string, dated bool, shape []byte) {
		reply := buildReply(shape)
		layout := Plain
		if dated {
			layout = Dated
		}
		r, err := parseResource(layout, name, reply)
		if len(reply) < 5 {
			if err == nil {
				t.Fatalf("short reply %v accepted", reply)
			}
			return
		}
		if err != nil || r.Name != name || r.TTL < 0 || len(r.Owner) > 32 {
			t.Fatalf("parseResource(%q, %v) = %+v, %v", name, reply, r, err)
		}
		cur, ok := reply[0].(string)
		if ok && dated && len(cur) >= 32+StampLen && (cur[32:33] == MarkAlone || cur[32:33] == MarkQueued) {
			if at, isTime := parseGrantTime(cur[33 : 32+StampLen]); isTime {
				if !r.Since.Equal(at) || GrantTime(r.Since) != cur[33:32+StampLen] {
					t.Fatalf("lock value %q read with since %s", cur, r.Since)
				}
				cur = cur[:32] + cur[32+StampLen:]
			}
		}
		switch {
		case ok && r.Version == 0 && r.Owner+r.Metadata != cur:
			t.Fatalf("lock value %q read as owner %q and metadata %q", cur, r.Owner, r.Metadata)
		case ok && r.Version != 0 && (r.Owner != cur[:min(len(cur), 32)] || len(r.Owner) != 32):
			t.Fatalf("lock value %q read as owner %q with version %d", cur, r.Owner, r.Version)
		case !ok && (r.Owner != "" || r.Metadata != "" || r.Token != 0 || r.Version != 0 || !r.Since.IsZero()):
			t.Fatalf("free lock read as %+v", r)
		}
		if !r.Since.IsZero() && !dated {
			clock, _ := reply[3].(string)
			if now, err := strconv.ParseUint(clock, 10, 64); err != nil || uint64(r.Since.UnixMicro()) > now || r.Since.UnixMicro() != int64(r.Token) {
				t.Fatalf("since %s with token %d and the clock %q", r.Since, r.Token, clock)
			}
		}
		var waiters []string
		for _, w := range reply[5:] {
			if s, ok := w.(string); ok {
				waiters = append(waiters, s)
			}
		}
		if strings.Join(waiters, "\x00") != strings.Join(r.Waiters, "\x00") || len(waiters) != len(r.Waiters) {
			t.Fatalf("waiters %q, want %q", r.Waiters, waiters)
		}
	})
}

// values are the strings and integers buildReply picks from.
var values = []string{"", "0123456789abcdef0123456789abcdef", "0123456789abcdef0123456789abcdefmeta", "w1", "w2",
	"12345678901234567890", "x", "-1", "ü", "1732000000000000", "1732000000000001",
	"0123456789abcdef0123456789abcdef0000000000000007new", "0123456789abcdef0123456789abcdef1795747072592486meta",
	"0123456789abcdef0123456789abcdef00000000000000007new", "0123456789abcdef0123456789abcdef11795747072592486meta"}

// buildReply makes a reply from pairs of bytes: a type (s string, i
// integer, n nil, a array, e error) and the index of a value.
func buildReply(shape []byte) []any {
	var out []any
	for i := 0; i+1 < len(shape) && len(out) < 64; i += 2 {
		v := values[int(shape[i+1])%len(values)]
		switch shape[i] {
		case 's':
			out = append(out, v)
		case 'i':
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				n = int64(shape[i+1]) - 128
			}
			out = append(out, n)
		case 'n':
			out = append(out, nil)
		case 'a':
			out = append(out, []any{v, int64(1)})
		case 'e':
			out = append(out, goredis.Nil)
		default:
			out = append(out, float64(shape[i+1]))
		}
	}
	return out
}
