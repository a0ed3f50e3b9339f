// Package server is the dlm server's replicated core: a hashicorp/raft FSM
// over the lock table (package locktable) and a single-node Raft Node that
// proposes commands to it in batches.
//
// Every state change is a dlmpb.Command. The Node stamps each Raft entry (a
// dlmpb.Batch of commands) with the leader's clock; the FSM applies the
// commands in order with locktable.Stamp{Index: the entry's Raft index, Now:
// the stamp} and never reads a clock itself, so every replica reaches the
// same state. Fencing tokens are therefore at least the Raft index of the
// entry that granted them and strictly increase, also within one entry.
//
// Session liveness is not decided here: keepalives are never logged, and a
// session ends only through a replicated CloseSession or ExpireSessions
// command proposed by the leader.
package server
