package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// --- Issue 17, item 3: caps on locks per resource and per server; every listing paged ---

// answers reads the answers to the n requests just sent on r (in any
// order), skipping acks and notices, and returns the grants and refusals
// by request sequence number.
func (r *rawSession) answers(n int) (granted map[uint64]*dlmpb.Granted, refused map[uint64]*dlmpb.Refused) {
	r.t.Helper()
	granted, refused = map[uint64]*dlmpb.Granted{}, map[uint64]*dlmpb.Refused{}
	for len(granted)+len(refused) < n {
		m := r.recvSkipAcks()
		switch {
		case m.GetGranted() != nil:
			granted[m.GetGranted().GetId().GetSeq()] = m.GetGranted()
		case m.GetRefused() != nil:
			refused[m.GetRefused().GetId().GetSeq()] = m.GetRefused()
		case m.GetQueued() != nil:
			granted[m.GetQueued().GetId().GetSeq()] = nil
		default:
			r.t.Fatalf("unexpected answer %v", m)
		}
	}
	return granted, refused
}

// TestAttackHolderFloodRefusedAtCap: the attacker's 20 sessions x 10,000
// NL locks on one resource, scaled down: 5 sessions x 20 NL locks on a
// resource capped at 40 locks. The first 40 are granted, every other one
// is refused with REASON_TOO_MANY_HOLDERS naming the resource and the
// bound; a conversion at the cap is still granted (it adds no lock), and
// other resources are not affected.
func TestAttackHolderFloodRefusedAtCap(t *testing.T) {
	s := startServer(t, ServerConfig{Node: Config{Limits: locktable.Limits{MaxLocksPerResource: 40, MaxLocksPerSession: 20}}})
	var sessions []*rawSession
	var aLock uint64
	total := 0
	for i := range 5 {
		r, _ := open(t, s, 0, 10*time.Second)
		sessions = append(sessions, r)
		for range 20 {
			r.lock("flood", dlmpb.Mode_MODE_NL)
		}
		granted, refused := r.answers(20)
		total += len(granted)
		for _, g := range granted {
			if g == nil {
				t.Fatal("an NL lock was queued")
			}
			aLock = g.GetLockId()
		}
		for seq, m := range refused {
			if m.GetReason() != dlmpb.Reason_REASON_TOO_MANY_HOLDERS || !strings.Contains(m.GetMessage(), `"flood" has 40 locks, the limit is 40`) {
				t.Fatalf("session %d, request %d refused with %v %q, want TOO_MANY_HOLDERS naming the resource and the bound", i, seq, m.GetReason(), m.GetMessage())
			}
		}
	}
	if total != 40 {
		t.Fatalf("%d NL locks granted on one resource, the cap is 40", total)
	}
	if st, _ := s.Status(context.Background(), nil); st.GetLocks() != 40 {
		t.Fatalf("the server holds %d locks, want 40", st.GetLocks())
	}
	// Session 2 owns aLock (the last granted): converting it adds no lock.
	r := sessions[1]
	r.seq++
	r.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
		Id: &dlmpb.RequestID{Session: r.sid, Seq: r.seq}, LockId: aLock, Mode: dlmpb.Mode_MODE_PR}}})
	r.granted(r.seq)
	// A session that was refused can lock elsewhere.
	sessions[4].granted(sessions[4].lock("elsewhere", dlmpb.Mode_MODE_EX))
}

// TestAttackServerWideLockCap: locks spread over many resources and
// sessions stop at the server-wide bound, with REASON_TOO_MANY_LOCKS
// saying so; a release makes room again.
func TestAttackServerWideLockCap(t *testing.T) {
	s := startServer(t, ServerConfig{Node: Config{Limits: locktable.Limits{MaxLocks: 30}}})
	var first *rawSession
	var firstLock uint64
	total := 0
	for i := range 4 {
		r, _ := open(t, s, 0, 10*time.Second)
		for j := range 10 {
			r.lock(fmt.Sprintf("wide/%d/%d", i, j), dlmpb.Mode_MODE_EX)
		}
		granted, refused := r.answers(10)
		total += len(granted)
		if i == 0 {
			first, firstLock = r, granted[1].GetLockId()
		}
		for seq, m := range refused {
			if m.GetReason() != dlmpb.Reason_REASON_TOO_MANY_LOCKS || !strings.Contains(m.GetMessage(), "the table has 30 locks, the limit is 30") {
				t.Fatalf("request %d refused with %v %q, want TOO_MANY_LOCKS for the table", seq, m.GetReason(), m.GetMessage())
			}
		}
	}
	if total != 30 {
		t.Fatalf("%d locks granted, the server-wide cap is 30", total)
	}
	first.release(firstLock)
	if m := first.recvSkipAcks(); m.GetReleased() == nil {
		t.Fatalf("release: %v", m)
	}
	first.granted(first.lock("wide/again", dlmpb.Mode_MODE_EX))
}

// bigResource fills resource "big" with 2 x 600 PR holders (one of them
// converting to EX) and 5 EX waiters, and puts one lock on "a" and "z" (a
// metadata of 1 KiB each), so that a listing must cut "big" across pages.
// It returns the sessions.
func bigResource(t *testing.T, s *Server) []*rawSession {
	meta := func(l *dlmpb.LockRequest) { l.Metadata = []byte(strings.Repeat("m", MaxMetadataBytes)) }
	var rs []*rawSession
	for range 2 {
		r, _ := open(t, s, 0, 10*time.Second)
		for range 600 {
			r.lock("big", dlmpb.Mode_MODE_PR, meta)
		}
		if granted, refused := r.answers(600); len(granted) != 600 {
			t.Fatalf("%d granted, refusals %v", len(granted), refused)
		}
		rs = append(rs, r)
	}
	r, _ := open(t, s, 0, 10*time.Second)
	r.granted(r.lock("a", dlmpb.Mode_MODE_EX, meta))
	r.granted(r.lock("z", dlmpb.Mode_MODE_EX, meta))
	for range 5 {
		r.lock("big", dlmpb.Mode_MODE_EX, meta)
	}
	if _, refused := r.answers(5); len(refused) != 0 {
		t.Fatalf("waiters refused: %v", refused)
	}
	// Session 1's lock 7th lock converts to EX: queued behind the others.
	var conv uint64
	s.Node().FSM().View(func(tb *locktable.Table) {
		ri, _ := tb.Resource("big")
		conv = uint64(ri.Holders[7].ID)
	})
	c := rs[0]
	c.seq++
	c.send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: &dlmpb.ConvertRequest{
		Id: &dlmpb.RequestID{Session: c.sid, Seq: c.seq}, LockId: conv, Mode: dlmpb.Mode_MODE_EX}}})
	if m := c.recvSkipAcks(); m.GetQueued() == nil {
		t.Fatalf("conversion: %v", m)
	}
	return append(rs, r)
}

// entryIDs returns the lock ids of a resource's three lists, in order.
func entryIDs(r *dlmpb.ResourceInfo) []uint64 {
	var ids []uint64
	for _, q := range [][]*dlmpb.LockInfo{r.GetHolders(), r.GetConverting(), r.GetWaiting()} {
		for _, l := range q {
			ids = append(ids, l.GetLockId())
		}
	}
	return ids
}

// wantEntries returns, by resource name, the lock ids of the three lists
// of every resource, in order, from the table itself.
func wantEntries(s *Server) map[string][]uint64 {
	want := map[string][]uint64{}
	s.Node().FSM().View(func(tb *locktable.Table) {
		for _, ri := range tb.Resources("", 0) {
			for _, q := range [][]locktable.LockInfo{ri.Holders, ri.Converting, ri.Waiting} {
				for _, l := range q {
					want[ri.Name] = append(want[ri.Name], uint64(l.ID))
				}
			}
		}
	})
	return want
}

// joinPages checks that the pages read hold at most maxEntries entries
// each, that cut resources continue where they stopped, and that the
// entries joined are those of the table, each exactly once.
func joinPages(t *testing.T, s *Server, pages []*dlmpb.ListResponse, maxEntries int) {
	t.Helper()
	got := map[string][]uint64{}
	var last *dlmpb.ResourceInfo
	for i, p := range pages {
		n := 0
		for _, r := range p.GetResources() {
			ids := entryIDs(r)
			n += len(ids)
			if want := r.GetHoldersTotal() + r.GetConvertingTotal() + r.GetWaitingTotal(); r.GetContinues() != (r.GetFirst()+uint32(len(ids)) < want) {
				t.Fatalf("page %d: %q from %d with %d of %d entries, continues %v", i, r.GetName(), r.GetFirst(), len(ids), want, r.GetContinues())
			}
			if r.GetFirst() != uint32(len(got[r.GetName()])) || (r.GetFirst() > 0 && (last == nil || !last.GetContinues() || last.GetName() != r.GetName())) {
				t.Fatalf("page %d: %q starts at %d after %d entries of it", i, r.GetName(), r.GetFirst(), len(got[r.GetName()]))
			}
			got[r.GetName()] = append(got[r.GetName()], ids...)
			last = r
		}
		if n > maxEntries {
			t.Fatalf("page %d has %d entries, the bound is %d", i, n, maxEntries)
		}
	}
	want := wantEntries(s)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("pages joined: %d resources, want %d:\n got  %v\n want %v", len(got), len(want), got, want)
	}
}

// TestAttackListPagesBoundedByLocks: one resource with more locks than a
// page made List answer every lock at once (7 MB for 200,000, over gRPC's
// 4 MB). Pages are bounded by locks, 1000 by default or fewer on request,
// cut the resource and go on from the cursor; joined, they give every
// entry exactly once.
func TestAttackListPagesBoundedByLocks(t *testing.T) {
	s := startServer(t, ServerConfig{Node: Config{Limits: locktable.Limits{MaxLocksPerSession: 1000}}})
	bigResource(t, s)
	c := dialPB(t, s.Addr())
	read := func(req *dlmpb.ListRequest) []*dlmpb.ListResponse {
		var pages []*dlmpb.ListResponse
		for {
			resp, err := c.List(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			if pages = append(pages, resp); resp.GetNext() == "" {
				return pages
			}
			if len(pages) > 5000 {
				t.Fatal("the listing does not end")
			}
			req.After = resp.GetNext()
		}
	}
	pages := read(&dlmpb.ListRequest{})
	if len(pages) < 2 {
		t.Fatalf("1,208 entries in %d page(s) of at most %d", len(pages), DefaultListLocks)
	}
	joinPages(t, s, pages, DefaultListLocks)
	joinPages(t, s, read(&dlmpb.ListRequest{LockLimit: 97, Limit: 2}), 97)
	joinPages(t, s, read(&dlmpb.ListRequest{LockLimit: MaxListLocks + 1}), MaxListLocks)
	if pages, want := read(&dlmpb.ListRequest{Prefix: "big", LockLimit: 1}), len(wantEntries(s)["big"]); len(pages) != want || want != 1206 {
		t.Fatalf("%d pages of one entry, want %d (1206)", len(pages), want)
	}

	// A cursor that is not one is refused, naming it.
	_, err := c.List(context.Background(), &dlmpb.ListRequest{After: "big\x00x"})
	wantCode(t, err, codes.InvalidArgument, "a malformed cursor")
	if !strings.Contains(err.Error(), `"big\x00x"`) {
		t.Fatalf("error %v does not name the cursor", err)
	}
}

// httpJSON gets path from s's HTTP server and decodes the JSON answer into
// v; it returns the status code and the body's size.
func httpJSON(t *testing.T, s *Server, path string, v any) (int, int) {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v\n%s", path, err, b)
		}
	}
	return resp.StatusCode, len(b)
}

// TestAttackHTTPListingsBounded: `curl /v1/resources` returned every lock
// of every resource (104 MB) and /v1/sessions every lock of every session.
// Both are paged now, by locks too, with a next cursor; joined, the pages
// give every lock exactly once.
func TestAttackHTTPListingsBounded(t *testing.T) {
	s := startServer(t, ServerConfig{Node: Config{Limits: locktable.Limits{MaxLocksPerSession: 1000}}})
	rs := bigResource(t, s)

	readResources := func(query string) []*dlmpb.ListResponse {
		var pages []*dlmpb.ListResponse
		after := ""
		for len(pages) <= 1000 {
			var raw json.RawMessage
			path := "/v1/resources?" + query + "&after=" + url.QueryEscape(after)
			if code, _ := httpJSON(t, s, path, &raw); code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
			resp := new(dlmpb.ListResponse)
			if err := protojson.Unmarshal(raw, resp); err != nil {
				t.Fatal(err)
			}
			if pages = append(pages, resp); resp.GetNext() == "" {
				return pages
			}
			after = resp.GetNext()
		}
		t.Fatal("the listing does not end")
		return nil
	}
	joinPages(t, s, readResources(""), DefaultListLocks)
	joinPages(t, s, readResources("locks=50&limit=3"), 50)

	// Sessions: each page at most limit sessions and locks locks.
	type sessionPage struct {
		Sessions []struct {
			ID         uint64
			LocksTotal int  `json:"locks_total"`
			First      int  `json:"first"`
			Continues  bool `json:"continues"`
			Locks      []struct{ ID uint64 }
		}
		Next string
	}
	readSessions := func(query string, maxSessions, maxLocks int) map[uint64][]uint64 {
		got := map[uint64][]uint64{}
		after := ""
		for pages := 0; ; pages++ {
			if pages > 1000 {
				t.Fatal("the listing does not end")
			}
			var p sessionPage
			path := "/v1/sessions?" + query + "&after=" + url.QueryEscape(after)
			if code, _ := httpJSON(t, s, path, &p); code != http.StatusOK {
				t.Fatalf("%s: %d", path, code)
			}
			n := 0
			for _, si := range p.Sessions {
				n += len(si.Locks)
				if si.First != len(got[si.ID]) || si.Continues != (si.First+len(si.Locks) < si.LocksTotal) {
					t.Fatalf("%s: session %d from %d with %d of %d locks, continues %v, after %d of them", path, si.ID, si.First, len(si.Locks), si.LocksTotal, si.Continues, len(got[si.ID]))
				}
				for _, l := range si.Locks {
					got[si.ID] = append(got[si.ID], l.ID)
				}
			}
			if n > maxLocks || len(p.Sessions) > maxSessions {
				t.Fatalf("%s: %d sessions and %d locks, the bounds are %d and %d", path, len(p.Sessions), n, maxSessions, maxLocks)
			}
			if p.Next == "" {
				return got
			}
			after = p.Next
		}
	}
	want := map[uint64][]uint64{}
	s.Node().FSM().View(func(tb *locktable.Table) {
		for _, si := range tb.Sessions(0, 0) {
			for _, l := range si.Locks {
				want[uint64(si.ID)] = append(want[uint64(si.ID)], uint64(l.ID))
			}
		}
	})
	if len(want) != len(rs) {
		t.Fatalf("%d sessions with locks, want %d", len(want), len(rs))
	}
	for _, q := range []struct {
		query           string
		sessions, locks int
	}{{"", DefaultListLimit, DefaultListLocks}, {"locks=70&limit=1", 1, 70}, {"locks=999999&limit=2", 2, MaxListLocks}} {
		if got := readSessions(q.query, q.sessions, q.locks); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("%q: sessions joined\n got  %v\n want %v", q.query, got, want)
		}
	}

	for _, path := range []string{"/v1/sessions?after=x", "/v1/sessions?after=1:x", "/v1/sessions?locks=-1", "/v1/resources?locks=x", "/v1/resources?after=big%00-3"} {
		if code, _ := httpJSON(t, s, path, new(json.RawMessage)); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", path, code)
		}
	}
}

// TestAttackListPageSizeWorstCase measures the largest pages with the
// default limits: one resource at MaxLocksPerResource (10,000 locks, a
// name of the longest length, 1 KiB of metadata each), and as many
// one-lock resources as a page holds. Every page, in gRPC and in HTTP's
// JSON, stays well under gRPC's 4 MB.
func TestAttackListPageSizeWorstCase(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a resource with 10,000 locks")
	}
	s := startServer(t, ServerConfig{})
	meta := func(l *dlmpb.LockRequest) { l.Metadata = []byte(strings.Repeat("m", MaxMetadataBytes)) }
	big := strings.Repeat("b", DefaultMaxNameLen)
	n := locktable.DefaultMaxLocksPerResource
	for range n / locktable.DefaultMaxLocksPerSession {
		r, _ := open(t, s, 0, time.Minute)
		for range locktable.DefaultMaxLocksPerSession {
			r.lock(big, dlmpb.Mode_MODE_NL, meta)
		}
		if granted, _ := r.answers(locktable.DefaultMaxLocksPerSession); len(granted) != locktable.DefaultMaxLocksPerSession {
			t.Fatalf("%d granted", len(granted))
		}
	}
	r, _ := open(t, s, 0, time.Minute)
	r.refusal(r.lock(big, dlmpb.Mode_MODE_NL), dlmpb.Reason_REASON_TOO_MANY_HOLDERS)
	for i := range MaxListLimit {
		r.lock(fmt.Sprintf("%s%06d", strings.Repeat("s", DefaultMaxNameLen-6), i), dlmpb.Mode_MODE_EX, meta)
	}
	if granted, _ := r.answers(MaxListLimit); len(granted) != MaxListLimit {
		t.Fatalf("%d granted", len(granted))
	}

	const grpcMax = 4 << 20
	c := dialPB(t, s.Addr())
	largest, largestJSON, pages := 0, 0, 0
	for after := ""; ; pages++ {
		resp, err := c.List(context.Background(), &dlmpb.ListRequest{After: after, Limit: MaxListLimit})
		if err != nil {
			t.Fatal(err)
		}
		largest = max(largest, proto.Size(resp))
		var raw json.RawMessage
		code, size := httpJSON(t, s, "/v1/resources?limit=1000&after="+url.QueryEscape(after), &raw)
		if code != http.StatusOK {
			t.Fatalf("/v1/resources: %d", code)
		}
		largestJSON = max(largestJSON, size)
		if after = resp.GetNext(); after == "" {
			break
		}
	}
	largestSessions := 0
	for after := ""; ; {
		var p struct{ Next string }
		code, size := httpJSON(t, s, "/v1/sessions?limit=1000&after="+url.QueryEscape(after), &p)
		if code != http.StatusOK {
			t.Fatalf("/v1/sessions: %d", code)
		}
		largestSessions = max(largestSessions, size)
		if after = p.Next; after == "" {
			break
		}
	}
	t.Logf("%d locks on one resource and %d one-lock resources, names of %d bytes, metadata of %d: %d pages, the largest %d bytes in gRPC, %d in JSON; the largest page of /v1/sessions %d bytes",
		n, MaxListLimit, DefaultMaxNameLen, MaxMetadataBytes, pages+1, largest, largestJSON, largestSessions)
	if largest > grpcMax/3 || largestJSON > grpcMax/2 || largestSessions > grpcMax/2 {
		t.Fatalf("largest page %d bytes (gRPC), %d (JSON of /v1/resources), %d (/v1/sessions): over a third (half) of gRPC's 4 MB", largest, largestJSON, largestSessions)
	}
}
