// Package server is the dlm server: the lock table (package locktable)
// replicated with hashicorp/raft and served over gRPC (api/dlm.proto).
//
// The layers, bottom up:
//
//   - FSM: the Raft state machine. Every state change is a dlmpb.Command; the
//     Node stamps each Raft entry (a dlmpb.Batch of commands) with the
//     leader's clock, and the FSM applies the commands in order with
//     locktable.Stamp{Index: the entry's Raft index, Now: the stamp}. It never
//     reads a clock, so every replica reaches the same state. Fencing tokens
//     are at least the Raft index of the entry that granted them and strictly
//     increase, also within one entry; a new leader raises them before it
//     serves (RaiseTokensCmd), above what an older copy of the state, once
//     restored, could repeat.
//   - Node: a Raft node (one voter for now) with a durable raft-wal log or an
//     in-memory one, and a proposer that batches concurrent commands into
//     entries.
//   - Server: the gRPC service and HTTP endpoints. Each client session is one
//     bidirectional stream; an FSM observer routes every answer and lock
//     event to the stream of the session concerned, in log order. The leader
//     keeps session liveness (keepalives are never logged): it proposes an
//     ExpireSessions entry when a session's deadline passes, acknowledges
//     keepalives only after confirming its leadership, and on becoming
//     leader applies its whole log and gives every session a fresh deadline
//     before serving. Watch streams are woken by the same observer when a
//     command changes their resource (see Server.Watch): the leader pushes
//     changes, bounded by Config.MaxWatches and MaxWatchesPerIdentity.
//
// Security is optional and layered: TLS for the client ports
// (Config.TLS, LoadTLS, with client certificates for mutual TLS),
// mutually authenticated TLS for Raft between nodes (Config.RaftTLS,
// LoadRaftTLS), bearer tokens (Tokens) and authorization rules by name
// prefix (Rules), checked per gRPC call, per session request and per HTTP
// request. Sessions remember the identity that opened them, and only it
// may resume them, and only with the session's resume token (128 random
// bits returned once when it is opened; the server keeps its SHA-256): a
// resume without it is refused and the session's stream is warned. Across
// identities, another session's lock is answered exactly as a missing one.
// Without tokens or client certificates the server is open, as it always
// was; resume tokens apply there too.
//
// Start runs a Server; cmd/dlm's `dlm server` is its command line.
package server
