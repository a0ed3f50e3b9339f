package raftnode

import (
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
)

// appendRetryInterval is how often retryTransport tries a failed
// replicating AppendEntries again: a peer that comes back gets its entries
// within about this long of serving.
const appendRetryInterval = 50 * time.Millisecond

// appendRetryLimit bounds how long retryTransport keeps one AppendEntries
// going. It is a backstop: the retries stop sooner when the node stops
// leading, the peer leaves the configuration or the node closes. Past it,
// the error goes to Raft, which counts one failure.
const appendRetryLimit = 10 * time.Minute

// retryTransport is the node's Raft transport with persistent replication:
// a replicating AppendEntries (not a heartbeat) that fails is tried again,
// at once and then every appendRetryInterval, for as long as Raft would go
// on replicating to that peer anyway: while this node leads in the
// request's term, the peer is in the latest configuration at the same
// address, and the node is not closing (and at most appendRetryLimit).
//
// Why: hashicorp/raft v1.7.3 counts each failed AppendEntries of its
// replication to a follower (replication.go:233), resets the count only on
// an answer (:253, :258), and before each next try sleeps 10ms doubled per
// failure past the second, up to 10.24s, a sleep that only Raft's shutdown
// interrupts (:211-216; backoff in util.go). While a follower is down the
// leader tries again at every commit timeout or new entry, so the failures
// pile up, and after the follower's restart the leader may send it nothing
// for seconds; its heartbeats, which have their own backoff capped at half
// the heartbeat timeout (:413), reach it long before. With the retries
// here, Raft sees one slow call instead of a series of failures, and the
// peer is fed as soon as it answers.
//
// Sending a request again is safe: AppendEntries is idempotent (a follower
// skips the entries it has and checks the previous entry as usual), and
// the retries stop once the node no longer leads in the request's term.
// Heartbeats are passed through: Raft paces them itself, with a backoff
// capped at half the heartbeat timeout, and they answer VerifyLeader.
type retryTransport struct {
	*raft.NetworkTransport
	stop <-chan struct{} // closed when the node closes
	log  *slog.Logger
	raft atomic.Pointer[raft.Raft] // nil until Raft runs: no retries before

	// failed counts the replicating AppendEntries errors handed to Raft,
	// each of which lengthens its backoff.
	failed atomic.Uint64
}

// retryTransport keeps NetworkTransport's optional interfaces: Raft uses
// pre-vote only with a transport that offers it, and closes one that can.
var _ interface {
	raft.Transport
	raft.WithPreVote
	raft.WithClose
} = (*retryTransport)(nil)

// newRetryTransport wraps t; stop is closed when the node closes. Call
// setRaft once Raft runs.
func newRetryTransport(t *raft.NetworkTransport, stop <-chan struct{}, log *slog.Logger) *retryTransport {
	return &retryTransport{NetworkTransport: t, stop: stop, log: log}
}

// setRaft gives the transport the Raft instance whose leadership and
// configuration decide how long a retry goes on.
func (t *retryTransport) setRaft(r *raft.Raft) { t.raft.Store(r) }

// AppendEntries implements raft.Transport: NetworkTransport's, tried again
// on failure as the type's documentation says. The first time is at once
// (a pooled connection the peer closed fails once, then a new one is
// dialled), the next ones are paced by retry. It returns the last error
// when it gives up.
func (t *retryTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	err := t.NetworkTransport.AppendEntries(id, target, req, resp)
	if err == nil || isHeartbeat(req) {
		return err
	}
	if t.replicating(id, target, req.Term) {
		*resp = raft.AppendEntriesResponse{}
		if err = t.NetworkTransport.AppendEntries(id, target, req, resp); err != nil {
			err = t.retry(id, target, req, resp, err)
		}
	}
	if err != nil {
		t.failed.Add(1)
	}
	return err
}

// retry sends req again every appendRetryInterval until the peer answers
// or Raft would no longer replicate to it (see replicating), at most
// appendRetryLimit; err is the last failure so far, returned if it gives
// up.
func (t *retryTransport) retry(id raft.ServerID, target raft.ServerAddress, req *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse, err error) error {
	t.log.Warn("dlm server: raft: replication to a peer failed; retrying until it answers", "peer", id, "err", err)
	start := time.Now()
	timer := time.NewTimer(appendRetryInterval)
	defer timer.Stop()
	for tries := 3; ; tries++ {
		select {
		case <-t.stop:
			return err
		case <-timer.C:
		}
		if !t.replicating(id, target, req.Term) || time.Since(start) > appendRetryLimit {
			t.log.Info("dlm server: raft: no longer retrying replication to a peer", "peer", id, "tries", tries-1,
				"for", time.Since(start).Round(time.Millisecond), "err", err)
			return err
		}
		*resp = raft.AppendEntriesResponse{}
		if err = t.NetworkTransport.AppendEntries(id, target, req, resp); err == nil {
			t.log.Info("dlm server: raft: replication to a peer resumed", "peer", id, "tries", tries,
				"after", time.Since(start).Round(time.Millisecond))
			return nil
		}
		timer.Reset(appendRetryInterval)
	}
}

// replicating reports whether Raft still replicates to peer id at target
// for term: the node is not closing, leads in term, and has id at target
// in its latest configuration. (GetConfiguration does not wait for Raft's
// main loop in v1.7.3: it copies the latest configuration.)
func (t *retryTransport) replicating(id raft.ServerID, target raft.ServerAddress, term uint64) bool {
	select {
	case <-t.stop:
		return false
	default:
	}
	r := t.raft.Load()
	if r == nil || t.IsShutdown() || r.State() != raft.Leader || r.CurrentTerm() != term {
		return false
	}
	for _, s := range r.GetConfiguration().Configuration().Servers {
		if s.ID == id {
			return s.Address == target
		}
	}
	return false
}

// isHeartbeat reports whether req is one of Raft's heartbeats: no entries,
// no previous entry, no commit index, as NetworkTransport itself tells them
// apart on receipt (net_transport.go:675-680 in v1.7.3). A replicating
// request at the very start of the log looks the same; it is just not
// retried.
func isHeartbeat(req *raft.AppendEntriesRequest) bool {
	return len(req.Entries) == 0 && req.PrevLogEntry == 0 && req.PrevLogTerm == 0 && req.LeaderCommitIndex == 0
}
