package server

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// obj is a decoded JSON object.
type obj = map[string]any

// shape checks the JSON of one endpoint: where names it in failures.
type shape struct {
	t     *testing.T
	where string
}

func (s shape) at(name string) shape { return shape{s.t, s.where + "." + name} }

func (s shape) fatalf(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf(s.where+": "+format, args...)
}

// field returns o's field name, failing if it is absent.
func (s shape) field(o obj, name string) any {
	s.t.Helper()
	v, ok := o[name]
	if !ok {
		s.fatalf("no field %q in %v", name, o)
	}
	return v
}

// absent fails if o has any of names: a field that does not apply is left
// out, not shown as a zero.
func (s shape) absent(o obj, names ...string) {
	s.t.Helper()
	for _, n := range names {
		if v, ok := o[n]; ok {
			s.fatalf("field %q is %v, want it absent", n, v)
		}
	}
}

// str returns o's field name, which must be a JSON string.
func (s shape) str(o obj, name string) string {
	s.t.Helper()
	v, ok := s.field(o, name).(string)
	if !ok {
		s.fatalf("%q is %T %v, want a string", name, o[name], o[name])
	}
	return v
}

// uint64 returns o's 64-bit field name, which must be a decimal in a JSON
// string (protojson's form of 64-bit integers).
func (s shape) uint64(o obj, name string) uint64 {
	s.t.Helper()
	v, err := strconv.ParseUint(s.str(o, name), 10, 64)
	if err != nil {
		s.fatalf("%q: %v", name, err)
	}
	return v
}

// number returns o's 32-bit field name, which must be a JSON number.
func (s shape) number(o obj, name string) float64 {
	s.t.Helper()
	v, ok := s.field(o, name).(float64)
	if !ok {
		s.fatalf("%q is %T %v, want a number", name, o[name], o[name])
	}
	return v
}

// time returns o's timestamp field name, which must be RFC 3339.
func (s shape) time(o obj, name string) time.Time {
	s.t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s.str(o, name))
	if err != nil {
		s.fatalf("%q: not RFC 3339: %v", name, err)
	}
	return v
}

// durationForm is protojson's form of a google.protobuf.Duration.
var durationForm = regexp.MustCompile(`^-?[0-9]+(\.[0-9]+)?s$`)

// duration returns o's duration field name, which must read "1.5s".
func (s shape) duration(o obj, name string) time.Duration {
	s.t.Helper()
	v := s.str(o, name)
	d, err := time.ParseDuration(v)
	if !durationForm.MatchString(v) || err != nil {
		s.fatalf("%q is %q, want a duration in seconds such as \"1.5s\"", name, v)
	}
	return d
}

// list returns o's array field name, of objects.
func (s shape) list(o obj, name string) []obj {
	s.t.Helper()
	v, ok := s.field(o, name).([]any)
	if !ok {
		s.fatalf("%q is %T, want an array", name, o[name])
	}
	out := make([]obj, len(v))
	for i, e := range v {
		if out[i], ok = e.(obj); !ok {
			s.fatalf("%q[%d] is %T, want an object", name, i, e)
		}
	}
	return out
}

// object returns o's message field name.
func (s shape) object(o obj, name string) obj {
	s.t.Helper()
	v, ok := s.field(o, name).(obj)
	if !ok {
		s.fatalf("%q is %T, want an object", name, o[name])
	}
	return v
}

// one returns the element of os whose field key is value.
func (s shape) one(os []obj, key, value string) obj {
	s.t.Helper()
	for _, o := range os {
		if o[key] == value {
			return o
		}
	}
	s.fatalf("none with %s %q in %v", key, value, os)
	return nil
}

// jsonState is the state the shape test lists: an EX lock with metadata,
// a PR request queued behind it with a deadline, and a semaphore holder.
type jsonState struct {
	meta    string
	a, b, c *rawSession
	exToken uint64
}

// exLock checks the EX holder of orders/42.
func (st *jsonState) exLock(s shape, l obj) {
	s.t.Helper()
	if s.uint64(l, "session") != st.a.sid || s.str(l, "resource") != "orders/42" || s.str(l, "state") != "STATE_GRANTED" {
		s.fatalf("holder %v", l)
	}
	if m := s.str(l, "mode"); m != "MODE_EX" {
		s.fatalf("mode %q, want MODE_EX by name", m)
	}
	if m := s.str(l, "metadata"); m != st.meta {
		s.fatalf("metadata %q, want %q as given (a string, not base64)", m, st.meta)
	}
	if tok := s.uint64(l, "token"); tok != st.exToken {
		s.fatalf("token %d, want %d", tok, st.exToken)
	}
	s.uint64(l, "lock_id")
	if at := s.time(l, "granted_at"); time.Since(at) > time.Minute || time.Until(at) > time.Minute {
		s.fatalf("granted_at %v: not now", at)
	}
	s.absent(l, "requested", "queued_at", "deadline", "permits")
}

// prWaiter checks the PR request queued on orders/42.
func (st *jsonState) prWaiter(s shape, l obj) {
	s.t.Helper()
	if s.uint64(l, "session") != st.b.sid || s.str(l, "state") != "STATE_WAITING" || s.str(l, "requested") != "MODE_PR" {
		s.fatalf("waiter %v", l)
	}
	queued := s.time(l, "queued_at")
	if d := s.time(l, "deadline").Sub(queued); d < 59*time.Second || d > 61*time.Second {
		s.fatalf("deadline %v after queued_at, want the minute of its wait", d)
	}
	s.absent(l, "mode", "token", "granted_at", "permits")
}

// semHolder checks the holder of two permits of the semaphore pool.
func (st *jsonState) semHolder(s shape, l obj) {
	s.t.Helper()
	if s.uint64(l, "session") != st.c.sid || s.str(l, "state") != "STATE_GRANTED" || !s.field(l, "semaphore").(bool) {
		s.fatalf("semaphore holder %v", l)
	}
	if p := s.number(l, "permits"); p != 2 {
		s.fatalf("permits %v, want 2", p)
	}
	s.uint64(l, "token")
	s.time(l, "granted_at")
	s.absent(l, "mode", "requested") // no MODE_UNSPECIFIED for a semaphore
}

// resources checks a listing of the two resources (List, the feed).
func (st *jsonState) resources(s shape, rs []obj) {
	s.t.Helper()
	r := s.one(rs, "name", "orders/42")
	rs0 := s.at("orders/42")
	if r["semaphore"] != false {
		rs0.fatalf("semaphore %v", r["semaphore"])
	}
	rs0.absent(r, "capacity", "used")
	holders, waiting := rs0.list(r, "holders"), rs0.list(r, "waiting")
	if len(holders) != 1 || len(waiting) != 1 || len(rs0.list(r, "converting")) != 0 {
		rs0.fatalf("holders %v, waiting %v", holders, waiting)
	}
	if rs0.number(r, "holders_total") != 1 || rs0.number(r, "waiting_total") != 1 || rs0.number(r, "converting_total") != 0 {
		rs0.fatalf("totals: %v", r)
	}
	st.exLock(rs0.at("holders[0]"), holders[0])
	if d := rs0.at("holders[0]").duration(holders[0], "session_expires_in"); d <= 0 || d > time.Minute {
		rs0.fatalf("session_expires_in %v", d)
	}
	if l := rs0.at("holders[0]").str(holders[0], "session_label"); l != s.t.Name() {
		rs0.fatalf("session_label %q", l)
	}
	st.prWaiter(rs0.at("waiting[0]"), waiting[0])

	p := s.one(rs, "name", "pool")
	ps := s.at("pool")
	if p["semaphore"] != true || ps.number(p, "capacity") != 3 || ps.number(p, "used") != 2 {
		ps.fatalf("semaphore %v", p)
	}
	sh := ps.list(p, "holders")
	if len(sh) != 1 {
		ps.fatalf("holders %v", sh)
	}
	st.semHolder(ps.at("holders[0]"), sh[0])
}

// session checks the description of session a (ttl a minute).
func (st *jsonState) session(s shape, o obj) {
	s.t.Helper()
	if s.str(o, "label") != s.t.Name() {
		s.fatalf("label %v", o["label"])
	}
	if ttl := s.duration(o, "ttl"); ttl != time.Minute {
		s.fatalf("ttl %v, want 1m", ttl)
	}
	if at := s.time(o, "opened_at"); time.Since(at) > time.Minute {
		s.fatalf("opened_at %v", at)
	}
	if d := s.duration(o, "expires_in"); d <= 0 || d > time.Minute {
		s.fatalf("expires_in %v", d)
	}
	if n := s.uint64(o, "lock_count"); n != 1 {
		s.fatalf("lock_count %d, want 1", n)
	}
}

func getJSON(t *testing.T, s *Server, path string) obj {
	t.Helper()
	code, body := httpGet(t, http.DefaultClient, "http://"+s.HTTPAddr()+path, "")
	if code != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, code, body)
	}
	if strings.Contains(body, "MODE_UNSPECIFIED") || strings.Contains(body, "unix_nano") || strings.Contains(body, "_ms\"") {
		t.Fatalf("GET %s: a zero mode, Unix nanoseconds or milliseconds:\n%s", path, body)
	}
	var o obj
	if err := json.Unmarshal([]byte(body), &o); err != nil {
		t.Fatalf("GET %s: %v\n%s", path, err, body)
	}
	return o
}

// TestHTTPJSONShape pins the JSON of every listing endpoint for a known
// state: names as in api/dlm.proto, 64-bit integers as strings, modes and
// states by name (and absent where they do not apply), metadata as the
// string given, times in RFC 3339 and durations in seconds ("60s").
func TestHTTPJSONShape(t *testing.T) {
	s := startServer(t, Config{})
	st := &jsonState{meta: `worker <3> "ünï" \ ok`}
	st.a, _ = open(t, s, 0, time.Minute)
	st.b, _ = open(t, s, 0, time.Minute)
	st.c, _ = open(t, s, 0, time.Minute)
	st.exToken = st.a.granted(st.a.lock("orders/42", dlmpb.Mode_MODE_EX, func(l *dlmpb.LockRequest) { l.Metadata = []byte(st.meta) })).GetToken()
	st.b.lock("orders/42", dlmpb.Mode_MODE_PR, func(l *dlmpb.LockRequest) { l.Wait = durationpb.New(time.Minute) })
	if q := st.b.recvSkipAcks().GetQueued(); q == nil {
		t.Fatal("the PR request was not queued")
	}
	st.c.granted(st.c.lock("pool", dlmpb.Mode_MODE_UNSPECIFIED, func(l *dlmpb.LockRequest) { l.Capacity, l.Permits = 3, 2 }))

	root := shape{t, "/v1/resources"}
	st.resources(root, root.list(getJSON(t, s, "/v1/resources"), "resources"))

	root = shape{t, "/v1/sessions"}
	sessions := root.list(getJSON(t, s, "/v1/sessions"), "sessions")
	sa := root.one(sessions, "id", strconv.FormatUint(st.a.sid, 10))
	st.session(root, sa)
	locks := root.list(sa, "locks")
	if len(locks) != 1 {
		root.fatalf("locks of session a: %v", locks)
	}
	st.exLock(root.at("locks[0]"), locks[0])
	root.absent(sa, "owner") // shown to admins only

	root = shape{t, "/v1/admin/sessions"}
	sessions = root.list(getJSON(t, s, "/v1/admin/sessions"), "sessions")
	sa = root.one(sessions, "id", strconv.FormatUint(st.a.sid, 10))
	st.session(root, sa)
	if root.uint64(sa, "held") != 1 || root.uint64(sa, "waiting") != 0 {
		root.fatalf("held and waiting: %v", sa)
	}
	sb := root.one(sessions, "id", strconv.FormatUint(st.b.sid, 10))
	if root.uint64(sb, "held") != 0 || root.uint64(sb, "waiting") != 1 {
		root.fatalf("held and waiting of b: %v", sb)
	}

	root = shape{t, "/v1/status"}
	status := getJSON(t, s, "/v1/status")
	st.status(root, status)

	root = shape{t, "/v1/members"}
	members := getJSON(t, s, "/v1/members")
	if root.str(members, "leader_id") != "node-1" {
		root.fatalf("leader_id %v", members["leader_id"])
	}
	if m := root.list(members, "members"); len(m) != 1 || m[0]["id"] != "node-1" || m[0]["suffrage"] != "voter" || m[0]["leader"] != true || m[0]["self"] != true {
		root.fatalf("members %v", m)
	}

	root = shape{t, "/v1/events"}
	snap := firstEvent(t, s)
	st.status(root.at("status"), root.object(snap, "status"))
	st.resources(root, root.list(snap, "resources"))
	sessions = root.list(snap, "sessions")
	sa = root.one(sessions, "id", strconv.FormatUint(st.a.sid, 10))
	st.session(root.at("sessions[a]"), sa)
	if root.uint64(sa, "held") != 1 || root.uint64(sa, "waiting") != 0 {
		root.fatalf("held and waiting: %v", sa)
	}
	if root.number(snap, "limit") != DefaultListLimit || root.str(snap, "prefix") != "" || snap["more_resources"] != false {
		root.fatalf("snapshot %v", snap)
	}
	if m := root.list(snap, "members"); len(m) != 1 || m[0]["id"] != "node-1" {
		root.fatalf("members %v", m)
	}
}

// status checks a status: three sessions, two resources, three locks of
// which one waits.
func (st *jsonState) status(s shape, o obj) {
	s.t.Helper()
	if s.str(o, "node_id") != "node-1" || o["ready"] != true || o["leader"] != true || s.str(o, "raft_state") != "leader" {
		s.fatalf("status %v", o)
	}
	if s.uint64(o, "sessions") != 3 || s.uint64(o, "resources") != 2 || s.uint64(o, "locks") != 3 || s.uint64(o, "pending") != 1 {
		s.fatalf("counts %v", o)
	}
	s.uint64(o, "applied_index")
	if tok := s.uint64(o, "last_token"); tok < st.exToken {
		s.fatalf("last_token %d", tok)
	}
	if now := s.time(o, "now"); time.Since(now) > time.Minute {
		s.fatalf("now %v", now)
	}
}

// firstEvent returns the first snapshot of /v1/events, decoded.
func firstEvent(t *testing.T, s *Server) obj {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := getEvents(t, ctx, s, "")
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/v1/events: %s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 16<<20)
	for sc.Scan() {
		if data, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var o obj
			if err := json.Unmarshal([]byte(data), &o); err != nil {
				t.Fatalf("/v1/events: %v\n%s", err, data)
			}
			return o
		}
	}
	t.Fatalf("/v1/events ended without an event: %v", sc.Err())
	return nil
}
