// Package chaos is dlm's fault-injection safety harness: a 3-node dlm
// cluster as separate processes on loopback, client processes running a
// contended EX workload, faults, and a checker over the recorded history.
//
// # The set-up
//
// Every node is a `dlm server` process (durable log) behind two TCP
// proxies of the harness: one in front of its Raft port (its
// -raft-advertise address, and its entry in every node's -peers) and one in
// front of its client port. Nodes bind their outgoing Raft connections to
// their own loopback IP (-raft-source 127.0.0.11, .12, ...) and clients bind
// theirs to their own (127.0.0.21, ...; the probe 127.0.0.20), so a proxy
// knows who connects and the block matrix (Net) can cut any pair: a cut pair's
// open connections are closed and new ones refused, both ways. Clients reach
// nodes only through the proxies: their dialer maps a node's own client
// address (named by a follower's redirect) to its proxy.
//
// Clients are separate processes (the harness runs its own executable again;
// see RunClientIfAsked), so that SIGSTOP pauses them for real. Each loops:
// acquire one of a few resources (lease TTL 1s, auto-renewed, session TTL
// 1s), write (token, client, start) to the fenced store, hold a few ms, write
// the end, release, checking its lease's deadline before every write; and
// it prints every step as a JSON line stamped with
// CLOCK_MONOTONIC, which all processes of the host share. The fenced store is
// an HTTP server in the harness that rejects a token lower than the
// greatest it has seen for the resource and records its decisions. A probe
// client takes a resource of its own, uncontended, so that its grants show
// when the cluster serves whatever the workers wait for.
//
// # Rounds
//
// Each round starts on a healthy cluster (Cluster.AwaitHealthy: one leader,
// every node following it with the leader's log applied; a node restarted
// by the last round may need seconds, as hashicorp/raft backs off its
// replication to a follower that failed), makes a worker take a resource
// for a long hold (with another worker waiting for it), then injects one
// fault while the lock is held:
//
//   - kill-leader, kill-follower: SIGKILL; healed by a restart on the same
//     ports and data.
//   - stop-leader: SIGSTOP for longer than the election timeout; healed by
//     SIGCONT.
//   - partition-leader: the leader is cut off from the other nodes and from
//     every client; healed by mending the cuts.
//   - pause-client: SIGSTOP the holding client past its TTLs; SIGCONT.
//   - isolate-client: cut the holding client off from every node past its
//     session TTL; mend.
//   - flap-leader: pause or kill (in turn) the holding client, then kill -9
//     the leader every half TTL (restarting it at once) for 10 TTL; heal:
//     resume the client, or start it again under its name. A waiter of
//     its own waits for the held lock through the whole flap.
//   - fill-disk: fill the leader's or a follower's disk (a tmpfs per node,
//     root only) until its log's writes fail, and hold it; free it.
//
// then holds it, heals it and waits for the next grant.
//
// Standing faults run beside the rounds (Config.CancelShare,
// Config.TryClients): a share of the workers' calls have contexts that end
// at a random moment (an acquisition that fails without an answer is
// recorded unsure: indeterminate), and the strict workload's clients
// try-lock a resource of their own, judged against the strict model.
//
// # The checker
//
// Check is a pure function over the history. It verifies (1) no two
// critical sections of a resource overlap in real time (grant acknowledged
// to release sent or the holder's deadline, whichever is first) unless the
// fenced store rejected the stale one or its process was stopped; (2) tokens
// strictly increase per resource in grant order (where the order is
// certain: one grant acknowledged before the other was requested); (3) no
// (resource, token) acknowledged to two leases; (4) no client still
// believes it holds a lock when another is granted it, a belief ending at
// the client's Lost, its release, or the lease deadline it computed itself
// and recorded at the grant and at every move (renewals, keepalives),
// whichever is first; (5) after every heal a grant comes within the
// recovery bound (election timeout + 1s); (6) after a flap-leader, another
// client is granted the victim's resource within 2 TTL + 2 election
// timeouts of its death. It also records recovery (heal to
// next grant) and fail-over (fault to next grant) times, and the lateness
// of loss notices: a Lost that fires after the recorded deadline is the
// scheduler running the client's goroutine late, which no lock service can
// prevent (the "no pause between checking and acting" assumption, and what
// fencing tokens are for); it is counted and measured, not a violation.
//
// A second judge, independent of the first, checks the same history for
// linearizability against a model of one lock with porcupine (see
// linearize.go); its verdict is reported beside the properties.
//
// The short run is TestChaosShortRun; TestChaosCatchesBrokenPromotion runs
// the same harness against a server built with -tags dlm_broken_promotion
// and requires the checker to report violations. Long runs:
//
//	go run ./internal/chaos/cmd/dlm-chaos -duration 30m
//	go run ./internal/chaos/cmd/dlm-chaos -broken
package chaos
