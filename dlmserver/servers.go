package dlmserver

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
)

// LeaderHeader is the trailer in which a server that is not the leader
// names the leader's client address ("" when it knows none).
const LeaderHeader = "dlm-leader"

// MaxServers bounds the addresses of one store.
const MaxServers = 16

// server is one address of the cluster and its (lazily connected) gRPC
// connection.
type server struct {
	addr   string
	conn   *grpc.ClientConn
	client dlmpb.DLMClient
	// grpcOnly is set once the session transport was found not served at
	// addr while gRPC was: the session goes over gRPC there.
	grpcOnly atomic.Bool
}

// servers are the cluster's addresses and which one the store uses now.
type servers struct {
	mu   sync.Mutex
	list []*server
	cur  int
	dial []grpc.DialOption
}

// newServers parses a comma-separated address list and makes a connection
// for each (gRPC connects lazily).
func newServers(addrs string, dial []grpc.DialOption) (*servers, error) {
	list, err := parseAddrs(addrs)
	if err != nil {
		return nil, err
	}
	ss := &servers{dial: dial}
	for _, a := range list {
		if err := ss.add(a); err != nil {
			return nil, errors.Join(err, ss.close())
		}
	}
	return ss, nil
}

// parseAddrs splits a comma-separated address list, trimming spaces around
// each address and dropping repeats. An empty address, or more than
// MaxServers, is an error.
func parseAddrs(addrs string) ([]string, error) {
	var list []string
	for _, a := range strings.Split(addrs, ",") {
		a = strings.TrimSpace(a)
		if a == "" {
			return nil, fmt.Errorf("%w: empty server address in %q", driver.ErrInvalid, addrs)
		}
		if slices.Contains(list, a) {
			continue
		}
		if len(list) == MaxServers {
			return nil, fmt.Errorf("%w: more than %d server addresses", driver.ErrInvalid, MaxServers)
		}
		list = append(list, a)
	}
	return list, nil
}

// add makes a connection to addr. The caller holds ss.mu or owns ss.
func (ss *servers) add(addr string) error {
	conn, err := grpc.NewClient(addr, ss.dial...)
	if err != nil {
		return fmt.Errorf("%w: dlm server %s: %w", driver.ErrUnavailable, addr, err)
	}
	ss.list = append(ss.list, &server{addr: addr, conn: conn, client: dlmpb.NewDLMClient(conn)})
	return nil
}

// find returns the index of addr, or -1. The caller holds ss.mu or owns ss.
func (ss *servers) find(addr string) int {
	for i, s := range ss.list {
		if s.addr == addr {
			return i
		}
	}
	return -1
}

// current returns the server in use.
func (ss *servers) current() *server {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.list[ss.cur]
}

// failed moves on from the server that failed with err: to the leader it
// names, if any (added to the list if new and there is room), else to the
// next address. It returns where it moved.
func (ss *servers) failed(from *server, err error, trailer metadata.MD) *server {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ss.list[ss.cur] != from {
		return ss.list[ss.cur] // another caller moved on already
	}
	if hint, _ := leaderHint(err, trailer); hint != "" && hint != from.addr {
		i := ss.find(hint)
		if i < 0 && len(ss.list) < MaxServers && ss.add(hint) == nil {
			i = len(ss.list) - 1
		}
		if i >= 0 {
			ss.cur = i
			return ss.list[i]
		}
	}
	ss.cur = (ss.cur + 1) % len(ss.list)
	return ss.list[ss.cur]
}

// size returns the number of addresses.
func (ss *servers) size() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return len(ss.list)
}

// close closes every connection.
func (ss *servers) close() error {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	var errs []error
	for _, s := range ss.list {
		errs = append(errs, s.conn.Close())
	}
	return errors.Join(errs...)
}

// leaderHint returns whether err is a dlm node's "not the leader"
// refusal, and the leader address it names: "" if it knows none, or if
// what it names is not a host:port address (which the store would
// otherwise dial as it is, as any gRPC target).
func leaderHint(err error, trailer metadata.MD) (hint string, notLeader bool) {
	if status.Code(err) != codes.Unavailable {
		return "", false
	}
	v := trailer.Get(LeaderHeader)
	if len(v) == 0 {
		return "", false
	}
	host, port, perr := net.SplitHostPort(v[0])
	if n, aerr := strconv.ParseUint(port, 10, 16); perr != nil || host == "" || aerr != nil || n == 0 {
		return "", true
	}
	return v[0], true
}
