package history

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
)

// The second judge: the same history checked for linearizability against a
// model of one lock with porcupine (the checker etcd's robustness tests
// use), independently of the properties above.
//
// The model is one EX lock per resource: free, or held by one lease, and
// the last token it granted. Its operations are
//
//   - acquire(lease) -> token: legal when the lock is free and the token is
//     greater than the last one; the lease then holds it;
//   - release(lease): legal when the lease holds it; the lock is then free.
//
// Each acquisition that was granted gives an acquire operation from its
// Requested to its Granted stamp. A lease released cleanly (Released with
// no error, never lost) gives a release from ReleaseSent to Released. A
// lease that ended any other way (lost, or its release failed) gives a
// release too, since the store drops it at some point, but one whose
// invocation is the end of the holder's belief (its Lost, its release or
// its recorded deadline, whichever came first: see PropBelief) and whose
// response is the next grant of the resource: the store may drop the lock
// at any point in between, and only then. Time is thus in the operations'
// intervals, not in the model, and every round is checked, faults and
// expiries included; tokens only growing is checked over the whole history.
//
// Failed acquisitions are left out: a wait that timed out changed nothing
// the clients saw.

// Linearizability is porcupine's verdict on a history.
type Linearizability struct {
	// Result is porcupine.Ok, porcupine.Illegal, or porcupine.Unknown (the
	// check ran out of time); empty when there was nothing to check.
	Result porcupine.CheckResult `json:"result"`
	// Ops counts the operations checked; Expiries those releases that were
	// modelled from the end of a holder's belief (lost leases).
	Ops, Expiries int
	// StrictOps counts the operations checked against the strict model
	// (the strict workload's, included in Ops); Refusals the refused
	// try-locks among them, Unsure the acquisitions that failed without
	// an answer (each an indeterminate hold).
	StrictOps, Refusals, Unsure int
	// Pieces counts the independent parts checked (per resource, split
	// where the lock was free and nothing was in flight).
	Pieces int
	// Illegal says where the first illegal part was.
	Illegal string `json:"illegal,omitempty"`
}

func (l Linearizability) String() string {
	if l.Result == "" {
		return "nothing to check"
	}
	s := fmt.Sprintf("%s (%d operations, %d of them expiries; %d parts)", l.Result, l.Ops, l.Expiries, l.Pieces)
	if l.StrictOps > 0 {
		s += fmt.Sprintf("; strict try-lock model: %d operations, %d refusals, %d without an answer", l.StrictOps, l.Refusals, l.Unsure)
	}
	if l.Illegal != "" {
		s += ": " + l.Illegal
	}
	return s
}

// lockState is the model's state.
type lockState struct {
	holder string // lease key; "" when free
	last   uint64 // the last token granted
}

// opKind is what an operation of either model does.
type opKind uint8

const (
	// opAcquire: acquire(lease) -> token, granted.
	opAcquire opKind = iota
	// opRelease: release(lease), legal while the lease holds the lock.
	opRelease
	// opRefused: a try-lock refused (strict model): legal while the lock
	// is held.
	opRefused
	// opMaybe: an acquisition that failed without an answer (strict
	// model): it may have taken the lock (if free), or done nothing.
	opMaybe
	// opDrop: the end of an opMaybe's possible hold (strict model): frees
	// the lock if the lease holds it, and does nothing otherwise.
	opDrop
)

// delta is how the operation moves the count of possible holds, for
// splitOps.
func (k opKind) delta() int {
	switch k {
	case opAcquire, opMaybe:
		return 1
	case opRelease, opDrop:
		return -1
	}
	return 0
}

// lockInput is an operation's input; an acquire's output is its token.
type lockInput struct {
	kind  opKind
	lease string
}

var lockModel = porcupine.Model{
	Init: func() any { return lockState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(lockState), input.(lockInput)
		if in.kind == opAcquire {
			token := output.(uint64)
			if s.holder != "" || token <= s.last {
				return false, s
			}
			return true, lockState{holder: in.lease, last: token}
		}
		if s.holder != in.lease {
			return false, s
		}
		return true, lockState{last: s.last}
	},
	DescribeOperation: describeLockOp,
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("holder %q, last token %d", s.holder, s.last)
	},
}

func describeLockOp(input, output any) string {
	in := input.(lockInput)
	switch in.kind {
	case opAcquire:
		return fmt.Sprintf("acquire(%s) -> %d", in.lease, output)
	case opRefused:
		return fmt.Sprintf("try(%s) -> refused", in.lease)
	case opMaybe:
		return fmt.Sprintf("try(%s) -> no answer", in.lease)
	case opDrop:
		return fmt.Sprintf("withdraw(%s)", in.lease)
	}
	return fmt.Sprintf("release(%s)", in.lease)
}

// strictModel is the strict try-lock model: one EX lock that every client
// tries with WithWait(0). A try-lock is granted iff the lock is free (with
// a greater token), refused only while it is held; a release that returned
// freed the lock by then; an acquisition that failed without an answer may
// have held the lock for a while (opMaybe, then opDrop), or not at all,
// which makes the model nondeterministic.
var strictModel = porcupine.NondeterministicModel{
	Step: func(state, input, output any) []any {
		s, in := state.(lockState), input.(lockInput)
		switch in.kind {
		case opAcquire:
			if token := output.(uint64); s.holder == "" && token > s.last {
				return []any{lockState{holder: in.lease, last: token}}
			}
		case opRefused:
			if s.holder != "" {
				return []any{s}
			}
		case opMaybe:
			if s.holder == "" {
				return []any{s, lockState{holder: in.lease, last: s.last}}
			}
			return []any{s}
		case opRelease:
			if s.holder == in.lease {
				return []any{lockState{last: s.last}}
			}
		case opDrop:
			if s.holder == in.lease {
				return []any{lockState{last: s.last}}
			}
			return []any{s}
		}
		return nil
	},
	DescribeOperation: describeLockOp,
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("holder %q, last token %d", s.holder, s.last)
	},
}

// linearize checks the leases of each resource (each sorted by grant) with
// porcupine, within cfg.LinearizeTimeout in all; the resources of the
// strict workload (those in strict, with every acquisition, granted or not,
// sorted by start) against the strict model.
func linearize(byRes, strict map[string][]*lease, resources []string, cfg CheckConfig) Linearizability {
	var v Linearizability
	start := time.Now()
	all := slices.Clone(resources)
	for res := range strict {
		if !slices.Contains(all, res) {
			all = append(all, res)
		}
	}
	slices.Sort(all)
	for _, res := range all {
		ls, isStrict := strict[res]
		var ops []porcupine.Operation
		if isStrict {
			var n strictCounts
			ops, n = strictOps(ls)
			v.StrictOps += len(ops)
			v.Refusals += n.refusals
			v.Unsure += n.unsure
			v.Expiries += n.expiries
		} else {
			var expiries int
			ops, expiries = lockOps(byRes[res])
			v.Expiries += expiries
		}
		v.Ops += len(ops)
		last := uint64(0)
		for _, piece := range splitOps(ops) {
			v.Pieces++
			left := time.Duration(0)
			if cfg.LinearizeTimeout > 0 {
				if left = cfg.LinearizeTimeout - time.Since(start); left <= 0 {
					v.Result = porcupine.Unknown
					return v
				}
			}
			init := lockState{last: last}
			m := lockModel
			m.Init = func() any { return init }
			if isStrict {
				nm := strictModel
				nm.Init = func() []any { return []any{init} }
				m = nm.ToModel()
			}
			switch porcupine.CheckOperationsTimeout(m, piece, left) {
			case porcupine.Illegal:
				v.Result = porcupine.Illegal
				v.Illegal = fmt.Sprintf("resource %q, %d operations from %s", res, len(piece), describeOp(piece[0]))
				return v
			case porcupine.Unknown:
				v.Result = porcupine.Unknown
				return v
			}
			for _, op := range piece {
				if op.Input.(lockInput).kind == opAcquire {
					last = max(last, op.Output.(uint64))
				}
			}
		}
	}
	if v.Ops > 0 {
		v.Result = porcupine.Ok
	}
	return v
}

func describeOp(op porcupine.Operation) string {
	return describeLockOp(op.Input, op.Output)
}

// end is after every stamp: the return of an operation that may take
// effect up to the end of the history.
const end = int64(math.MaxInt64 / 2)

// lockOps turns one resource's leases into operations, sorted by call.
func lockOps(leases []*lease) (ops []porcupine.Operation, expiries int) {
	for _, l := range leases {
		ops = append(ops, acquireOp(l))
		if op, expiry, ok := releaseOp(l, leases); ok {
			ops = append(ops, op)
			if expiry {
				expiries++
			}
		}
	}
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return ops, expiries
}

// acquireOp is a granted lease's acquire, from its request to its grant.
func acquireOp(l *lease) porcupine.Operation {
	call := l.grant.At
	if l.req != nil {
		call = l.req.At
	}
	return porcupine.Operation{Input: lockInput{kind: opAcquire, lease: l.key}, Call: call, Output: l.token, Return: l.grant.At}
}

// releaseOp is a granted lease's release: from its release sent to the
// release returned when that returned nil (and the lease was never lost),
// and otherwise (an expiry) from the end of the holder's belief to the
// next grant of the resource among leases (or the end of the history). A
// lease still believed held at the end of the history has none (ok false).
func releaseOp(l *lease, leases []*lease) (op porcupine.Operation, expiry, ok bool) {
	if l.lost == nil && l.rel != nil && l.released != nil && l.released.Note == "" {
		return porcupine.Operation{Input: lockInput{kind: opRelease, lease: l.key}, Call: l.rel.At, Return: max(l.rel.At, l.released.At)}, false, true
	}
	if l.beliefEnd == math.MaxInt64 {
		return porcupine.Operation{}, false, false
	}
	from := max(l.beliefEnd, l.grant.At)
	return porcupine.Operation{Input: lockInput{kind: opRelease, lease: l.key}, Call: from, Return: nextGrant(leases, l, from)}, true, true
}

// nextGrant is the first grant at or after from among leases, but l's own
// (end if none).
func nextGrant(leases []*lease, l *lease, from int64) int64 {
	ret := end
	for _, n := range leases {
		if n != l && n.grant != nil && n.grant.At >= from && n.grant.At < ret {
			ret = n.grant.At
		}
	}
	return ret
}

// strictCounts counts what strictOps made of a resource's acquisitions.
type strictCounts struct{ refusals, unsure, unsent, expiries int }

// strictOps turns every acquisition of a strict resource into operations,
// sorted by call: a granted one as in lockOps; a refused one (a definite
// answer: ErrNotAcquired, the call's context not ended) as a refusal from
// its request to its failure; one that failed without an answer, or never
// ended in the history, as an opMaybe and an opDrop, both from its request
// to the next grant answered to the same client (see ownBound). One that
// was never sent (Event.Unsent) is left out.
//
// The failure does not bound an unanswered try-lock: the dlm server
// client keeps a call its caller gave up and sends it again, with its
// sequence number, on the stream it opens after a leader change; the
// server may apply it then, grant it, and the client release it as soon
// as the grant comes (a chaos run saw it applied 0.31 s after its caller
// gave up, after two other grants of the resource). Its hold may start
// and end any time after its request.
func strictOps(leases []*lease) (ops []porcupine.Operation, n strictCounts) {
	for _, l := range leases {
		switch {
		case l.grant != nil:
			ops = append(ops, acquireOp(l))
			if op, expiry, ok := releaseOp(l, leases); ok {
				ops = append(ops, op)
				if expiry {
					n.expiries++
				}
			}
		case l.failed != nil && l.failed.Unsent:
			n.unsent++
		case l.failed != nil && !l.failed.Unsure:
			ops = append(ops, porcupine.Operation{Input: lockInput{kind: opRefused, lease: l.key}, Call: l.req.At, Return: l.failed.At})
			n.refusals++
		default:
			n.unsure++
			bound := ownBound(leases, l)
			ops = append(ops,
				porcupine.Operation{Input: lockInput{kind: opMaybe, lease: l.key}, Call: l.req.At, Return: bound},
				porcupine.Operation{Input: lockInput{kind: opDrop, lease: l.key}, Call: l.req.At, Return: bound})
		}
	}
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return ops, n
}

// ownBound is when an unanswered acquisition l must have taken effect, and
// its possible hold ended, at the latest: the first grant answered to
// l's client after l's request (end if none). The server applies a
// session's requests in order, and the client sends again what is
// unanswered ahead of anything new, and the release of an abandoned grant
// ahead of anything asked after that grant came; so l, if applied at
// all, was applied before the client's next request, and a grant of that
// request shows the lock free then: l's hold, if any, had ended. With a
// new session (the old one given up), l could only be applied while the
// old session lived on the server, which keeps the next grant from
// coming before the old session's locks are dropped. A refusal proves
// nothing (l's own hold may be what refused it), and no time does: the
// hold of a session the client gave up lasts until the server expires
// the session, which a flapping leader delays.
func ownBound(leases []*lease, l *lease) int64 {
	bound := end
	for _, n := range leases {
		if n != l && n.client == l.client && n.grant != nil && n.req != nil &&
			n.req.At > l.req.At && n.grant.At < bound {
			bound = n.grant.At
		}
	}
	return bound
}

// splitOps cuts sorted operations where the lock is surely free and nothing
// is in flight: every operation before the cut has returned, and every
// acquire (or possible hold) before it has its release (or drop) before it
// too. The parts are independent but for the last token, which the caller
// carries over.
func splitOps(ops []porcupine.Operation) [][]porcupine.Operation {
	var parts [][]porcupine.Operation
	from, held := 0, 0
	maxRet := int64(math.MinInt64)
	for i, op := range ops {
		if i > from && held == 0 && op.Call > maxRet {
			parts = append(parts, ops[from:i])
			from = i
		}
		maxRet = max(maxRet, op.Return)
		held += op.Input.(lockInput).kind.delta()
	}
	if from < len(ops) {
		parts = append(parts, ops[from:])
	}
	return parts
}
