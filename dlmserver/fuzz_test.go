package dlmserver

import (
	"errors"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/driver"
)

// FuzzParseAddrs: an address list parses into 1 to MaxServers distinct,
// trimmed, non-empty addresses holding every address of the list, or is an
// error matching driver.ErrInvalid.
func FuzzParseAddrs(f *testing.F) {
	for _, s := range []string{"127.0.0.1:7420", "a:1, b:2 ,a:1", "", ",", "a:1,,b:2", " ", "[::1]:7420,h",
		strings.Repeat("h:1,", MaxServers) + "h:1", strings.Repeat("x,", MaxServers) + "y"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		list, err := parseAddrs(s)
		if err != nil {
			if list != nil || !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("parseAddrs(%q) = %q, %v", s, list, err)
			}
			return
		}
		if len(list) == 0 || len(list) > MaxServers {
			t.Fatalf("parseAddrs(%q): %d addresses", s, len(list))
		}
		for i, a := range list {
			if a == "" || a != strings.TrimSpace(a) || strings.Contains(a, ",") || slices.Contains(list[:i], a) {
				t.Fatalf("parseAddrs(%q): address %q in %q", s, a, list)
			}
		}
		for _, part := range strings.Split(s, ",") {
			if !slices.Contains(list, strings.TrimSpace(part)) {
				t.Fatalf("parseAddrs(%q) = %q, without %q", s, list, part)
			}
		}
	})
}

// FuzzLeaderHint: a store told by a server that it is not the leader moves
// on to the leader it names, when that is a host:port address gRPC can
// dial, and to its next address otherwise; the addresses stay distinct, at most MaxServers,
// and the current one is always one of them.
func FuzzLeaderHint(f *testing.F) {
	for _, hint := range []string{"c:3", "a:1", "b:2", "", "unix:/tmp/x", "unix:x", "dns:///h:1", "h:0", "h:99999",
		":7420", "[::1]:7420", "h:+1", "h: 1", "passthrough:///h:1", "%:1"} {
		f.Add(hint, uint8(codes.Unavailable), uint8(16))
	}
	f.Add("c:3", uint8(codes.Internal), uint8(2))
	f.Fuzz(func(t *testing.T, hint string, code, size uint8) {
		n := 1 + int(size)%MaxServers
		addrs := make([]string, n)
		for i := range addrs {
			addrs[i] = "s" + strconv.Itoa(i) + ":1"
		}
		addrs[0] = "a:1"
		if n > 1 {
			addrs[1] = "b:2"
		}
		ss, err := newServers(strings.Join(addrs, ","), []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())})
		if err != nil {
			t.Fatal(err)
		}
		defer ss.close()
		from := ss.current()
		to := ss.failed(from, status.Error(codes.Code(code), "not the leader"), metadata.Pairs(LeaderHeader, hint))
		if to != ss.current() || ss.size() > MaxServers {
			t.Fatalf("moved to %q, current %q, %d servers", to.addr, ss.current().addr, ss.size())
		}
		var list []string
		for _, s := range ss.list {
			if slices.Contains(list, s.addr) {
				t.Fatalf("address %q twice", s.addr)
			}
			list = append(list, s.addr)
		}
		host, port, perr := net.SplitHostPort(hint)
		p, aerr := strconv.ParseUint(port, 10, 16)
		valid := perr == nil && host != "" && aerr == nil && p > 0
		if valid && !slices.Contains(addrs, hint) { // and gRPC takes it for a target
			conn, err := grpc.NewClient(hint, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if valid = err == nil; valid {
				conn.Close()
			}
		}
		switch {
		case codes.Code(code) == codes.Unavailable && valid && hint != from.addr && (slices.Contains(addrs, hint) || n < MaxServers):
			if to.addr != hint {
				t.Fatalf("hint %q: moved to %q", hint, to.addr)
			}
		case to.addr != addrs[1%n] || len(list) != n:
			t.Fatalf("hint %q (code %v): moved to %q of %q, want the next address %q", hint, codes.Code(code), to.addr, list, addrs[1%n])
		}
	})
}
