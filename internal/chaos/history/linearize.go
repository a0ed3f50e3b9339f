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

// lockInput is an operation's input; an acquire's output is its token.
type lockInput struct {
	acquire bool
	lease   string
}

var lockModel = porcupine.Model{
	Init: func() any { return lockState{} },
	Step: func(state, input, output any) (bool, any) {
		s, in := state.(lockState), input.(lockInput)
		if in.acquire {
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
	DescribeOperation: func(input, output any) string {
		in := input.(lockInput)
		if in.acquire {
			return fmt.Sprintf("acquire(%s) -> %d", in.lease, output)
		}
		return fmt.Sprintf("release(%s)", in.lease)
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		return fmt.Sprintf("holder %q, last token %d", s.holder, s.last)
	},
}

// linearize checks the leases of each resource (each sorted by grant) with
// porcupine, within timeout in all (0: no limit).
func linearize(byRes map[string][]*lease, resources []string, timeout time.Duration) Linearizability {
	var v Linearizability
	start := time.Now()
	for _, res := range resources {
		ops, expiries := lockOps(byRes[res])
		v.Ops += len(ops)
		v.Expiries += expiries
		last := uint64(0)
		for _, piece := range splitOps(ops) {
			v.Pieces++
			left := time.Duration(0)
			if timeout > 0 {
				if left = timeout - time.Since(start); left <= 0 {
					v.Result = porcupine.Unknown
					return v
				}
			}
			model := lockModel
			init := lockState{last: last}
			model.Init = func() any { return init }
			switch porcupine.CheckOperationsTimeout(model, piece, left) {
			case porcupine.Illegal:
				v.Result = porcupine.Illegal
				v.Illegal = fmt.Sprintf("resource %q, %d operations from %s", res, len(piece), describeOp(piece[0]))
				return v
			case porcupine.Unknown:
				v.Result = porcupine.Unknown
				return v
			}
			for _, op := range piece {
				if op.Input.(lockInput).acquire {
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
	return lockModel.DescribeOperation(op.Input, op.Output)
}

// lockOps turns one resource's leases into operations, sorted by call.
func lockOps(leases []*lease) (ops []porcupine.Operation, expiries int) {
	end := int64(math.MaxInt64 / 2) // after every stamp
	for _, l := range leases {
		call := l.grant.At
		if l.req != nil {
			call = l.req.At
		}
		ops = append(ops, porcupine.Operation{Input: lockInput{acquire: true, lease: l.key}, Call: call, Output: l.token, Return: l.grant.At})
		switch {
		case l.lost == nil && l.rel != nil && l.released != nil && l.released.Note == "":
			ops = append(ops, porcupine.Operation{Input: lockInput{lease: l.key}, Call: l.rel.At, Return: max(l.rel.At, l.released.At)})
		case l.beliefEnd != math.MaxInt64:
			from := max(l.beliefEnd, l.grant.At)
			ret := end
			for _, n := range leases {
				if n != l && n.grant.At >= from && n.grant.At < ret {
					ret = n.grant.At
				}
			}
			ops = append(ops, porcupine.Operation{Input: lockInput{lease: l.key}, Call: from, Return: ret})
			expiries++
		}
	}
	slices.SortStableFunc(ops, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
	return ops, expiries
}

// splitOps cuts sorted operations where the lock is surely free and nothing
// is in flight: every operation before the cut has returned, and every
// acquire before it has its release before it too. The parts are
// independent but for the last token, which the caller carries over.
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
		if op.Input.(lockInput).acquire {
			held++
		} else {
			held--
		}
	}
	if from < len(ops) {
		parts = append(parts, ops[from:])
	}
	return parts
}
