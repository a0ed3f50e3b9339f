package raftnode

import (
	"net"
	"slices"
	"strings"
	"testing"
)

// FuzzParsePeers: ParsePeers never panics; a list it accepts has ids and
// host:port addresses, trimmed, each named once, and formats back to a list
// that parses the same; and an id that is another peer's address is no
// repetition.
func FuzzParsePeers(f *testing.F) {
	for _, s := range []string{"node-1=127.0.0.1:7422", "a=h:1,b=h:2,c=[::1]:3", " a = h:1 , b=h:2", "a=h:1,a=h:2",
		"a=h:1,b=h:1", "h:1=h:2,x=h:1", "a", "a=", "=h:1", "a=h", "a=b=h:1", "", ",", "a=[::1:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		peers, err := ParsePeers(s)
		if err != nil {
			if peers != nil {
				t.Fatalf("ParsePeers(%q): %v and peers %v", s, err, peers)
			}
			return
		}
		parts := make([]string, len(peers))
		ids, addrs := map[string]bool{}, map[string]bool{}
		for i, p := range peers {
			if p.ID == "" || p.ID != strings.TrimSpace(p.ID) || p.Addr != strings.TrimSpace(p.Addr) || ids[p.ID] || addrs[p.Addr] {
				t.Fatalf("ParsePeers(%q): peer %q in %v", s, p, peers)
			}
			if _, _, err := net.SplitHostPort(p.Addr); err != nil {
				t.Fatalf("ParsePeers(%q): address %q: %v", s, p.Addr, err)
			}
			ids[p.ID], addrs[p.Addr] = true, true
			parts[i] = p.ID + "=" + p.Addr
		}
		again, err := ParsePeers(strings.Join(parts, ","))
		if err != nil || !slices.Equal(again, peers) {
			t.Fatalf("ParsePeers(%q) = %v, but its formatted form gives %v, %v", s, peers, again, err)
		}
		// A new peer named after the first one's address, at a new address.
		if extra := "fuzz.invalid:1"; !ids[peers[0].Addr] && !addrs[extra] && !strings.Contains(peers[0].Addr, "=") {
			more := append(parts, peers[0].Addr+"="+extra)
			if _, err := ParsePeers(strings.Join(more, ",")); err != nil {
				t.Fatalf("ParsePeers(%q): %v", strings.Join(more, ","), err)
			}
		}
	})
}
