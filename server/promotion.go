//go:build !dlm_broken_promotion

package server

import "time"

// promotionDeadline is the deadline a new leader gives an open session:
// now + its TTL + margin, so that no session dies for keepalives a
// previous leader received, or that arrived while no leader could take
// them.
func promotionDeadline(now time.Time, ttl, margin time.Duration) time.Time {
	return now.Add(ttl + margin)
}
