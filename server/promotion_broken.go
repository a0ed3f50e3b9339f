//go:build dlm_broken_promotion

package server

import "time"

// promotionDeadline, in this deliberately broken build (the build tag
// dlm_broken_promotion), gives sessions no extension on promotion: they
// expire as soon as a new leader serves, while their clients may still
// believe they hold their locks. It exists only so that the fault-injection
// checker can be shown to catch the violation; never build it for use.
func promotionDeadline(now time.Time, _, _ time.Duration) time.Time {
	return now
}
