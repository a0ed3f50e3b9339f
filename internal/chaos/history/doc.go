// Package history records what the clients of a fault-injection run saw
// (events stamped on the host's monotonic clock, Now) and judges it: Check
// tests the five safety properties of a lock service against a history
// (single grant, exclusion, belief, token order, recovery), and checks it
// again for linearizability with porcupine. Package chaos runs the faults
// and writes the histories.
package history
