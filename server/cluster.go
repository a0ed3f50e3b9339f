package server

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/server/cluster"
)

// leaderAddrs returns the client and HTTP addresses of the node this one
// takes for the leader, if it is another node whose addresses are known.
func (s *Server) leaderAddrs() (client, http string, ok bool) {
	id, _ := s.node.Leader()
	if id == "" || id == s.node.ID() {
		return "", "", false
	}
	return s.node.FSM().MemberAddrs(id)
}

// notLeader is the error of a stream opened on a node that does not serve
// (a follower, or a leader not ready yet); it names the leader in the
// stream's trailer when it is known.
func (s *Server) notLeader(stream grpc.ServerStream) error {
	msg := "dlm server: this node is not the leader, or not ready yet"
	client, _, ok := s.leaderAddrs()
	if ok {
		msg += "; the leader serves at " + client
	}
	if r, failing := s.storageRefusal(client); failing {
		stream.SetTrailer(metadata.Pairs(cluster.LeaderHeader, client, ReasonHeader, r.reason.String()))
		return r
	}
	// Present even when empty: it tells the client that a dlm node
	// answered, and that it may wait for an election to end.
	stream.SetTrailer(metadata.Pairs(cluster.LeaderHeader, client))
	return status.Error(codes.Unavailable, msg)
}

// Join asks a running cluster to add this server's node as a voter,
// through the HTTP address of any member (see cluster.Join; its failed
// attempts go to the server's logger). The node must have been opened with
// raftnode.Config.Join (or be restarting with its own Raft state, when
// joining again is harmless).
func (s *Server) Join(ctx context.Context, members string, opts ...cluster.Option) error {
	opts = append([]cluster.Option{cluster.WithLogger(s.log)}, opts...)
	return cluster.Join(ctx, members, s.node.ID(), s.node.Addr(), opts...)
}
