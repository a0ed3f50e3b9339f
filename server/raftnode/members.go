package raftnode

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm/locktable"
)

// Member is one server of the Raft configuration, as this node knows it.
type Member struct {
	// ID and Address are the server's Raft id and transport address.
	ID      string
	Address string
	// Client and HTTP are the addresses the member serves clients on, as
	// it recorded them when it last became leader; empty until then.
	Client string
	HTTP   string
	// Suffrage is "voter", "nonvoter" or "staging".
	Suffrage string
	// Leader is true for the server this node takes for the leader.
	Leader bool
	// Self is true for this node.
	Self bool
}

// Members returns the servers of the latest Raft configuration this node
// knows (committed or not), in id order, with the leader marked as this
// node sees it: none while an election runs. A single node is a cluster of
// one member. It does not wait for the Raft loop.
func (n *Node) Members() ([]Member, error) {
	f := n.raft.GetConfiguration()
	if err := f.Error(); err != nil {
		return nil, fmt.Errorf("dlm server: raft configuration: %w", err)
	}
	_, leader := n.raft.LeaderWithID()
	servers := f.Configuration().Servers
	out := make([]Member, len(servers))
	for i, s := range servers {
		out[i] = Member{
			ID:       string(s.ID),
			Address:  string(s.Address),
			Suffrage: strings.ToLower(s.Suffrage.String()),
			Leader:   leader != "" && s.ID == leader,
			Self:     s.ID == raft.ServerID(n.cfg.ID),
		}
		out[i].Client, out[i].HTTP, _ = n.fsm.MemberAddrs(string(s.ID))
	}
	slices.SortFunc(out, func(a, b Member) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Leader returns the id and address of the server this node takes for the
// leader, empty when it knows none.
func (n *Node) Leader() (id, addr string) {
	a, i := n.raft.LeaderWithID()
	return string(i), string(a)
}

// ID returns this node's Raft id.
func (n *Node) ID() string { return n.cfg.ID }

// Limits returns the lock table's limits, defaults applied.
func (n *Node) Limits() locktable.Limits { return n.cfg.Limits }

// Secure reports whether Raft between nodes runs over mutual TLS.
func (n *Node) Secure() bool { return n.cfg.RaftTLS != nil }

// Term returns the current Raft term.
func (n *Node) Term() uint64 { return n.raft.CurrentTerm() }

// State returns this node's Raft state (Leader, Follower, Candidate...).
func (n *Node) State() raft.RaftState { return n.raft.State() }

// Probe checks that a node at Raft address addr answers with a certificate
// this node's CA signed for a node (with RaftTLS), or at all (without).
func (n *Node) Probe(ctx context.Context, addr string) error { return n.layer.probe(ctx, addr) }

// Snapshot takes a snapshot of the state machine now and compacts the log
// behind it, as Raft does by itself past its thresholds.
func (n *Node) Snapshot() error { return n.raft.Snapshot().Error() }

// LogStore returns the durable log store the node uses (LogStoreWAL or
// LogStoreBolt), "" in memory.
func (n *Node) LogStore() string { return n.logStore }
