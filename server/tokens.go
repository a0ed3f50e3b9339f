package server

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/fsm"
)

// The restore margin: what a new leader adds to the last token before it
// serves (see restoreFloor).
const (
	// DefaultTokenRate is the default Config.TokenRate: the tokens per
	// second a cluster is assumed to issue at most, over ten times the
	// fastest rate measured (BENCHMARKS.md), since a token is at least its
	// entry's Raft index and grows by one per grant beyond it.
	DefaultTokenRate = 1_000_000
	// TokenMarginSlack is added to the age of the state, for the clock
	// skew between the node that stamped the last entry and the new
	// leader, and for the entries a copy taken mid-write misses.
	TokenMarginSlack = time.Minute
	// MaxTokenMargin bounds the restore margin: 2^48 tokens, about 8.9
	// years of DefaultTokenRate. A copy older than that needs -token-floor.
	MaxTokenMargin = 1 << 48
)

// restoreFloor is the floor a new leader raises the token sequence to
// before it serves: at least the operator's floor, and at least
//
//	last + min(MaxTokenMargin, rate × (max(now − clock, 0) + TokenMarginSlack))
//
// where last is the state's last token and clock its table clock (the
// leader's clock in the latest entry that reached the lock table, a raise
// included; 0 in a state that never had one: then the age is 0). The
// result is at most locktable.MaxTokenFloor, unless operator is higher.
// It returns the floor and the margin added to last.
func restoreFloor(last uint64, clock int64, now time.Time, rate int64, operator uint64) (floor, margin uint64) {
	var age time.Duration
	if clock > 0 {
		age = max(now.Sub(time.Unix(0, clock)), 0)
	}
	age += TokenMarginSlack
	margin = MaxTokenMargin
	if m := math.Ceil(age.Seconds() * float64(max(rate, 1))); m < MaxTokenMargin {
		margin = uint64(m)
	}
	floor = locktable.MaxTokenFloor
	if last < locktable.MaxTokenFloor-margin {
		floor = last + margin
	}
	return max(floor, operator), margin
}

// openTerm proposes the entries that open a term, in one batch, and waits
// until they apply: the RaiseTokensCmd (see restoreFloor), so that every
// token this leader grants is above every token the state's history can
// have issued, however old the state (a restored snapshot or data dir);
// and the CheckpointSessionsCmd that records every session with no record
// unheard from here on (see liveness). It retries until they apply or ctx
// ends (leadership ended), and reports whether they applied and the time
// before the first attempt: the sessions it recorded unheard have
// SessionMeta.SilentAt at or after it.
func (s *Server) openTerm(ctx context.Context) (since time.Time, ok bool) {
	since = time.Now()
	unheard := &dlmpb.Command{Op: &dlmpb.Command_CheckpointSessions{CheckpointSessions: &dlmpb.CheckpointSessionsCmd{Unheard: true}}}
	for {
		var last uint64
		var clock int64
		s.node.FSM().Read(func(v fsm.View) { last, clock = v.Table().LastToken(), v.Table().Now() })
		floor, margin := restoreFloor(last, clock, time.Now(), s.cfg.TokenRate, s.cfg.TokenFloor)
		pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		rs, err := s.node.Propose(pctx, &dlmpb.Command{Op: &dlmpb.Command_RaiseTokens{RaiseTokens: &dlmpb.RaiseTokensCmd{Floor: floor}}}, unheard)
		cancel()
		if err == nil && rs[0].Err != nil {
			// Not reached: floors are capped, and Start refuses an
			// operator's floor above the cap.
			s.log.Error("dlm server: token sequence not raised", "floor", floor, "err", rs[0].Err)
			return since, true
		}
		if err == nil {
			s.log.Info("dlm server: token sequence raised", "last_token", last, "margin", margin,
				"operator_floor", s.cfg.TokenFloor, "now_last_token", rs[0].Token)
			return since, true
		}
		if ctx.Err() != nil {
			return since, false
		}
		s.log.Warn("dlm server: token raise not applied, retrying", "err", err)
		select {
		case <-ctx.Done():
			return since, false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// checkTokenFloor refuses an operator's floor above the cap.
func checkTokenFloor(floor uint64) error {
	if floor > locktable.MaxTokenFloor {
		return fmt.Errorf("dlm server: token floor %d: %w (the most is %d)", floor, locktable.ErrTokenFloor, uint64(locktable.MaxTokenFloor))
	}
	return nil
}
