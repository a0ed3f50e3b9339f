package fsm

import (
	"fmt"
	"net"
	"slices"
	"strings"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// MaxMembers bounds the member addresses the FSM records.
const MaxMembers = 64

// memberAddrs is where a cluster member serves clients.
type memberAddrs struct {
	client, http string
}

// setMember applies a SetMemberCmd. The caller holds f.mu.
func (f *FSM) setMember(index uint64, op *dlmpb.SetMemberCmd) Result {
	if err := checkMember(op); err != nil {
		return Result{Index: index, Err: err}
	}
	if _, ok := f.members[op.GetId()]; !ok && len(f.members) >= MaxMembers {
		return Result{Index: index, Err: fmt.Errorf("%w: more than %d members", ErrInvalidCommand, MaxMembers)}
	}
	f.members[op.GetId()] = memberAddrs{client: op.GetClientAddr(), http: op.GetHttpAddr()}
	return Result{Index: index}
}

// checkMember rejects a malformed member record.
func checkMember(op *dlmpb.SetMemberCmd) error {
	if op.GetId() == "" || len(op.GetId()) > 256 {
		return fmt.Errorf("%w: member id %q", ErrInvalidCommand, op.GetId())
	}
	if _, _, err := net.SplitHostPort(op.GetClientAddr()); err != nil {
		return fmt.Errorf("%w: member %s: client address %q", ErrInvalidCommand, op.GetId(), op.GetClientAddr())
	}
	if a := op.GetHttpAddr(); a != "" {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return fmt.Errorf("%w: member %s: http address %q", ErrInvalidCommand, op.GetId(), a)
		}
	}
	return nil
}

// MemberAddrs returns the client (gRPC) and HTTP addresses the member id
// last recorded, and whether it recorded any.
func (f *FSM) MemberAddrs(id string) (client, http string, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	a, ok := f.members[id]
	return a.client, a.http, ok
}

// membersPB returns the member records in id order. The caller holds f.mu.
func (f *FSM) membersPB() []*dlmpb.SetMemberCmd {
	ids := make([]string, 0, len(f.members))
	for id := range f.members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	out := make([]*dlmpb.SetMemberCmd, len(ids))
	for i, id := range ids {
		a := f.members[id]
		out[i] = &dlmpb.SetMemberCmd{Id: id, ClientAddr: a.client, HttpAddr: a.http}
	}
	return out
}

// restoreMembers checks and loads a snapshot's member records.
func restoreMembers(recs []*dlmpb.SetMemberCmd) (map[string]memberAddrs, error) {
	if len(recs) > MaxMembers {
		return nil, fmt.Errorf("%w: %d member records", ErrMalformedSnapshot, len(recs))
	}
	out := make(map[string]memberAddrs, len(recs))
	prev := ""
	for _, r := range recs {
		if err := checkMember(r); err != nil || strings.Compare(r.GetId(), prev) <= 0 {
			return nil, fmt.Errorf("%w: member record %q out of order or malformed", ErrMalformedSnapshot, r.GetId())
		}
		prev = r.GetId()
		out[r.GetId()] = memberAddrs{client: r.GetClientAddr(), http: r.GetHttpAddr()}
	}
	return out, nil
}
