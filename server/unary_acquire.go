package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/fsm"
	"github.com/dlmhq/dlm/server/protocol"
)

// Acquire asks for a lock and waits for it.
func (u unary) Acquire(ctx context.Context, req *dlmpb.AcquireRequest) (*dlmpb.AcquireResponse, error) {
	p, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	if err := protocol.ValidateRequestKey(req.GetRequestId()); err != nil {
		return nil, refuse(err)
	}
	lr := &dlmpb.LockRequest{
		Id:       protocol.RequestID(sid, 0),
		Resource: req.GetResource(),
		Mode:     req.GetMode(),
		Owner:    req.GetOwner(),
		Wait:     req.GetWait(),
		Metadata: []byte(req.GetMetadata()),
		Capacity: req.GetCapacity(),
		Permits:  req.GetPermits(),
	}
	if lr.Capacity == 0 && lr.Mode == dlmpb.Mode_MODE_UNSPECIFIED {
		lr.Mode = dlmpb.Mode_MODE_EX
	}
	if lr.Capacity > 0 && lr.Permits == 0 {
		lr.Permits = 1
	}
	cmd, err := u.command(p, sid, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: lr}}, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	if lk := cmd.GetLock(); lk != nil {
		if tok := auth.PresentedToken(ctx); tok != "" {
			lk.Metadata = redactTokenBytes(lk.GetMetadata(), tok)
		}
	}
	return u.answer(ctx, mb, cmd, lockKey{}, lr.Mode, lr.Permits, req.GetPoll())
}

// Convert changes a lock's mode and waits for it.
func (u unary) Convert(ctx context.Context, req *dlmpb.ConvertLockRequest) (*dlmpb.AcquireResponse, error) {
	p, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	if err := protocol.ValidateRequestKey(req.GetRequestId()); err != nil {
		return nil, refuse(err)
	}
	cr := &dlmpb.ConvertRequest{Id: protocol.RequestID(sid, 0), LockId: req.GetLockId(), Mode: req.GetMode(), Wait: req.GetWait(), QueueConvert: req.GetQueueConvert()}
	cmd, err := u.command(p, sid, &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Convert{Convert: cr}}, req.GetRequestId())
	if err != nil {
		return nil, err
	}
	return u.answer(ctx, mb, cmd, lockKey{lock: req.GetLockId(), conversion: true}, req.GetMode(), 0, req.GetPoll())
}

// command builds and authorizes the command of session request m, with
// the call's request id as its key.
func (u unary) command(p auth.Principal, sid locktable.SessionID, m *dlmpb.SessionRequest, key string) (*dlmpb.Command, error) {
	cmd, _, err := protocol.RequestCommand(sid, m)
	if err != nil {
		return nil, refuse(err)
	}
	if msg, ok := u.s.authorize(p, sid, cmd); !ok {
		return nil, &refusal{code: codes.PermissionDenied, reason: dlmpb.Reason_REASON_PERMISSION_DENIED, msg: auth.ErrPermissionDenied.Error() + ": " + msg}
	}
	cmd.Key = key
	return cmd, nil
}

// answer proposes a lock request or conversion (conv names the lock of a
// conversion) and answers it: at once if it was granted or refused, else
// once it is granted or times out, or poll passes (QUEUED). If the client
// hangs up before, its request is withdrawn (see withdraw).
func (u unary) answer(ctx context.Context, mb *mailbox, cmd *dlmpb.Command, conv lockKey, mode dlmpb.Mode, permits uint32, poll *durationpb.Duration) (*dlmpb.AcquireResponse, error) {
	var pollFor time.Duration = -1
	if poll != nil {
		if err := poll.CheckValid(); err != nil || poll.AsDuration() < 0 {
			return nil, refuse(fmt.Errorf("%w: poll %v: want a duration of zero or more", protocol.ErrInvalidRequest, poll.AsDuration()))
		}
		pollFor = poll.AsDuration()
	}
	r, err := u.propose(ctx, cmd)
	if err != nil {
		return nil, err
	}
	if errors.Is(r.Err, locktable.ErrWouldBlock) {
		return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_TIMED_OUT, LockId: conv.lock, Mode: dlmpb.Mode(mode)}, nil
	}
	if r.Err != nil {
		return nil, refuse(r.Err)
	}
	k := conv
	if !conv.conversion {
		k = lockKey{lock: uint64(r.Lock)}
	}
	if r.Status == locktable.StatusGranted {
		if r.Duplicate && conv.conversion && dlmpb.Mode(r.Mode) != mode {
			// A retried conversion no longer queued and not granted (it
			// timed out, or was cancelled): the lock keeps its mode.
			return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_TIMED_OUT, LockId: conv.lock, Mode: dlmpb.Mode(r.Mode)}, nil
		}
		if r.Duplicate && r.Mode != 0 {
			mode = dlmpb.Mode(r.Mode)
		}
		return u.handOver(ctx, mb, k, granted(k.lock, r.Token, mode, permits))
	}
	return u.await(ctx, mb, k, mode, permits, pollFor)
}

// handOver ends a call granted k, its caller gone (its context ended)
// or not, decided once: a caller gone gets its context's error and the
// grant is withdrawn, never both; otherwise the grant is answered, and
// recorded for the transport's report of its delivery (see delivery),
// which withdraws it if the answer does not reach the client. Calls that
// share k (a retry with the same request id) decide together, through the
// mailbox: a grant another call answered is not withdrawn for this one,
// and a grant being withdrawn is answered to nobody.
func (u unary) handOver(ctx context.Context, mb *mailbox, k lockKey, resp *dlmpb.AcquireResponse) (*dlmpb.AcquireResponse, error) {
	if err := ctx.Err(); err != nil {
		if mb.claimWithdraw(k) {
			u.withdraw(ctx, mb, k, resp)
		}
		return nil, status.FromContextError(err).Err()
	}
	if !mb.handOut(k) {
		return nil, refuse(fmt.Errorf("%w: %d: the request was granted as the call that made it hung up, and the grant is withdrawn", locktable.ErrUnknownLock, k.lock))
	}
	recordGrant(ctx, func() {
		if mb.giveBack(k) {
			u.withdraw(ctx, mb, k, resp)
		}
	})
	return resp, nil
}

// await waits for the outcome of queued request k.
func (u unary) await(ctx context.Context, mb *mailbox, k lockKey, mode dlmpb.Mode, permits uint32, poll time.Duration) (*dlmpb.AcquireResponse, error) {
	w := mb.watch(k)
	settled := false // granted: handOver decided
	defer func() {
		// The client hung up while its request waited, and no retry waits
		// on: the request is withdrawn.
		if last := mb.unwatch(k, w); last && !settled && ctx.Err() != nil && mb.claimWithdraw(k) {
			u.withdraw(ctx, mb, k, nil)
		}
	}()
	if resp, done := u.current(k, mode, permits); done {
		if resp.GetOutcome() != dlmpb.AcquireResponse_OUTCOME_GRANTED {
			return resp, nil
		}
		settled = true
		return u.handOver(ctx, mb, k, resp)
	}
	var pollC <-chan time.Time
	if poll >= 0 {
		t := time.NewTimer(poll)
		defer t.Stop()
		pollC = t.C
	}
	select {
	case <-w.ready:
		e := w.ev
		if e.GetKind() == dlmpb.LockEvent_KIND_GRANTED {
			settled = true
			return u.handOver(ctx, mb, k, granted(k.lock, e.GetToken(), e.GetMode(), e.GetPermits()))
		}
		return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_TIMED_OUT, LockId: k.lock, Mode: e.GetMode()}, nil
	case <-mb.done:
		return nil, endedStatus(mb.ended())
	case <-pollC:
		return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_QUEUED, LockId: k.lock, Mode: mode}, nil
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
}

// current answers queued request k from the applied state, if it is no
// longer waiting: granted, or gone (timed out, or withdrawn).
func (u unary) current(k lockKey, mode dlmpb.Mode, permits uint32) (*dlmpb.AcquireResponse, bool) {
	var li locktable.LockInfo
	var ok bool
	u.s.node.FSM().Read(func(v fsm.View) { li, ok = v.Table().Describe(locktable.LockID(k.lock)) })
	switch {
	case !ok:
		return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_TIMED_OUT, LockId: k.lock, Mode: mode}, true
	case li.State == locktable.LockWaiting, k.conversion && li.State == locktable.LockConverting:
		return nil, false
	case k.conversion && dlmpb.Mode(li.Mode) != mode: // the conversion timed out: the old mode stays
		return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_TIMED_OUT, LockId: k.lock, Mode: mode}, true
	}
	return granted(k.lock, li.Token, dlmpb.Mode(li.Mode), li.Permits), true
}

// withdraw takes back the request k of a client that is gone: a new
// request is released, whether still queued or granted. A conversion is
// cancelled; one already granted (grant, the answer the client did not
// hear) cannot be, and is reported in the session's next KeepAlive, so
// that the client learns the mode it holds.
func (u unary) withdraw(ctx context.Context, mb *mailbox, k lockKey, grant *dlmpb.AcquireResponse) {
	var cmd *dlmpb.Command
	switch {
	case k.conversion && grant != nil:
		mb.keepGrant(&dlmpb.LockEvent{Kind: dlmpb.LockEvent_KIND_GRANTED, LockId: k.lock, Token: grant.GetToken(),
			Mode: grant.GetMode(), Conversion: true})
		return
	case k.conversion:
		cmd = &dlmpb.Command{Op: &dlmpb.Command_Cancel{Cancel: &dlmpb.CancelCmd{Session: uint64(mb.sid), LockId: k.lock}}}
	default:
		cmd = &dlmpb.Command{Op: &dlmpb.Command_Release{Release: &dlmpb.ReleaseCmd{Session: uint64(mb.sid), LockId: k.lock}}}
		mb.forget(k.lock)
	}
	if _, err := u.propose(ctx, cmd); err != nil {
		u.s.log.Warn("dlm server: withdrawing the request of a client that hung up", "session", mb.sid, "lock", k.lock, "err", err)
	}
	u.s.metrics.withdrawn.Inc()
}

func granted(lock, token uint64, mode dlmpb.Mode, permits uint32) *dlmpb.AcquireResponse {
	if permits > 0 {
		mode = dlmpb.Mode_MODE_UNSPECIFIED
	}
	return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_GRANTED, LockId: lock, Token: token, Mode: mode, Permits: permits}
}
