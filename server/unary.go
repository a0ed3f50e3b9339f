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

// The unary lock API (dlm.v1.Locks): each call is one request and one
// answer, for clients that do not speak the Session stream. It is served
// over gRPC (locksGRPC) and as JSON over HTTP (locksConnect), both thin
// adapters of unary. Every change is a command of the same state machine
// the stream feeds, built and checked by the same functions (package
// protocol); what is particular to this API is how a call learns the
// outcome of a queued request: it waits on the session's mailbox.

// errSessionEnded is why a mailbox ends with its session.
var errSessionEnded = errors.New("dlm server: the session ended (expired, closed or ended by an administrator): its locks are lost")

// withdrawTimeout bounds the proposal that withdraws the request of a call
// whose client hung up.
const withdrawTimeout = 10 * time.Second

// unary implements the Locks service on a Server.
type unary struct {
	dlmpb.UnimplementedLocksServer
	s *Server
}

// refusal is a refused unary call: a gRPC status plus, for refusals of the
// state machine, their Reason (sent as the dlm-reason header or trailer).
type refusal struct {
	code   codes.Code
	reason dlmpb.Reason
	msg    string
}

func (r *refusal) Error() string              { return r.msg }
func (r *refusal) GRPCStatus() *status.Status { return status.New(r.code, r.msg) }

// refuse turns a refusal of the state machine (or of request validation)
// into the call's error.
func refuse(err error) error {
	reason := protocol.RefusalReason(err)
	return &refusal{code: reasonCode(reason), reason: reason, msg: err.Error()}
}

// reasonCode is the gRPC code of a refusal.
func reasonCode(r dlmpb.Reason) codes.Code {
	switch r {
	case dlmpb.Reason_REASON_INVALID, dlmpb.Reason_REASON_INVALID_MODE, dlmpb.Reason_REASON_NAME_TOO_LONG:
		return codes.InvalidArgument
	case dlmpb.Reason_REASON_DEADLOCK:
		return codes.Aborted
	case dlmpb.Reason_REASON_UNKNOWN_SESSION, dlmpb.Reason_REASON_UNKNOWN_LOCK:
		return codes.NotFound
	case dlmpb.Reason_REASON_PERMISSION_DENIED:
		return codes.PermissionDenied
	case dlmpb.Reason_REASON_LIMIT, dlmpb.Reason_REASON_TOO_MANY_LOCKS, dlmpb.Reason_REASON_TOO_MANY_WAITERS,
		dlmpb.Reason_REASON_TOO_MANY_RESOURCES, dlmpb.Reason_REASON_TOO_MANY_SESSIONS,
		dlmpb.Reason_REASON_TOO_MANY_HOLDERS, dlmpb.Reason_REASON_QUOTA:
		return codes.ResourceExhausted
	case dlmpb.Reason_REASON_NOT_LEADER:
		return codes.Unavailable
	}
	return codes.FailedPrecondition
}

// caller returns the call's principal, refusing an unauthenticated one.
func (u unary) caller(ctx context.Context) (auth.Principal, error) {
	p := u.s.auth.Caller(ctx)
	if !p.Authenticated() {
		return p, status.Error(codes.Unauthenticated, auth.ErrUnauthenticated.Error())
	}
	return p, nil
}

// session checks a call's session handle on the serving leader and returns
// the session and its mailbox. A session that is gone is NOT_FOUND; one
// opened by another identity, or named with a wrong secret, is
// PERMISSION_DENIED.
func (u unary) session(ctx context.Context, handle string) (auth.Principal, locktable.SessionID, *mailbox, error) {
	p, err := u.caller(ctx)
	if err != nil {
		return p, 0, nil, err
	}
	if !u.s.live.isActive() {
		return p, 0, nil, u.notLeader(ctx)
	}
	sid, tok, err := protocol.ParseSessionHandle(handle)
	if err != nil {
		return p, 0, nil, refuse(err)
	}
	var mb *mailbox
	var gone, foreign, badSecret bool
	u.s.node.FSM().Read(func(v fsm.View) {
		rec, ok := v.Session(sid)
		switch {
		case !ok:
			gone = true
		case !p.IsUnrestricted() && rec.Owner != p.Identity():
			foreign = true
		case !v.Resumable(sid, tok):
			badSecret = true
		default:
			mb = u.s.hub.mailbox(sid) // under Read: no session ends in between
		}
	})
	switch {
	case gone:
		return p, sid, nil, &refusal{code: codes.NotFound, reason: dlmpb.Reason_REASON_UNKNOWN_SESSION,
			msg: fmt.Sprintf("dlm server: session %d is gone (expired, closed, or never opened): its locks are lost", sid)}
	case foreign:
		u.s.auth.Deny(p, auth.PermissionLock, fmt.Sprintf("(session %d)", sid))
		return p, sid, nil, &refusal{code: codes.PermissionDenied, reason: dlmpb.Reason_REASON_PERMISSION_DENIED,
			msg: fmt.Sprintf("%s: session %d was opened by another identity", auth.ErrPermissionDenied, sid)}
	case badSecret:
		u.s.log.Warn("dlm server: a unary call named a session with a wrong secret", "session", sid, "identity", p.Identity())
		return p, sid, nil, &refusal{code: codes.PermissionDenied, reason: dlmpb.Reason_REASON_BAD_RESUME_TOKEN,
			msg: fmt.Sprintf("%s: session %d: the handle's secret is not the session's", protocol.ErrBadResumeToken, sid)}
	}
	return p, sid, mb, nil
}

// notLeader is the error of a call on a node that does not serve: as
// DLM's (the leader's gRPC address in the message and the trailer), and
// the leader's HTTP address in the message, for JSON clients.
func (u unary) notLeader(ctx context.Context) error {
	err := u.s.notLeaderUnary(ctx)
	if _, httpAddr, ok := u.s.leaderAddrs(); ok && httpAddr != "" {
		return status.Error(codes.Unavailable, status.Convert(err).Message()+" (gRPC), "+httpAddr+" (HTTP)")
	}
	return err
}

// propose runs cmd through the log and returns its result. It does not
// stop when ctx ends (a hung-up client's request is withdrawn by the
// caller, which must know whether it applied), but gives up after
// withdrawTimeout.
func (u unary) propose(ctx context.Context, cmd *dlmpb.Command) (fsm.Result, error) {
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), withdrawTimeout)
	defer cancel()
	res, err := u.s.node.Propose(pctx, cmd)
	if err != nil {
		return fsm.Result{}, proposeStatus(err)
	}
	return res[0], nil
}

// OpenSession opens a session.
func (u unary) OpenSession(ctx context.Context, req *dlmpb.OpenSessionRequest) (*dlmpb.OpenSessionResponse, error) {
	p, err := u.caller(ctx)
	if err != nil {
		return nil, err
	}
	if !u.s.live.isActive() {
		return nil, u.notLeader(ctx)
	}
	if err := protocol.ValidateOpen(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Label: req.GetLabel()}}}); err != nil {
		return nil, refuse(err)
	}
	ttl, err := sessionTTL(req.GetTtl())
	if err != nil {
		return nil, &refusal{code: codes.InvalidArgument, reason: dlmpb.Reason_REASON_INVALID, msg: err.Error()}
	}
	tok, hash, err := fsm.NewResumeToken()
	if err != nil {
		return nil, status.Error(codes.Internal, err.Error())
	}
	r, err := u.propose(ctx, &dlmpb.Command{Op: &dlmpb.Command_OpenSession{OpenSession: &dlmpb.OpenSessionCmd{
		Label: redactToken(req.GetLabel(), auth.PresentedToken(ctx)), TtlNanos: int64(ttl), Owner: p.Identity(), ResumeHash: hash,
	}}})
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, refusalStatus(r.Err)
	}
	return &dlmpb.OpenSessionResponse{Session: protocol.SessionHandle(r.Session, tok), SessionId: uint64(r.Session), Ttl: durationpb.New(ttl)}, nil
}

// KeepAlive keeps a session alive and returns its events.
func (u unary) KeepAlive(ctx context.Context, req *dlmpb.KeepAliveRequest) (*dlmpb.KeepAliveResponse, error) {
	_, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	ttl, ok := u.s.live.touch(sid, time.Now())
	if !ok {
		return nil, &refusal{code: codes.NotFound, reason: dlmpb.Reason_REASON_UNKNOWN_SESSION,
			msg: fmt.Sprintf("dlm server: session %d has expired: its locks are lost", sid)}
	}
	// Acknowledge only once leadership is confirmed after the keepalive
	// arrived: a client never counts on an acknowledgement of a deposed
	// leader.
	if err := u.s.node.VerifyLeader(); err != nil {
		return nil, status.Error(codes.Unavailable, err.Error())
	}
	// held is the state after every request submitted before this
	// keepalive, releases answered early included.
	if err := u.s.node.Settle(ctx); err != nil {
		return nil, proposeStatus(err)
	}
	resp := &dlmpb.KeepAliveResponse{Ttl: durationpb.New(ttl), Events: mb.takeEvents()}
	u.s.node.FSM().Read(func(v fsm.View) {
		if info, ok := v.Table().Session(sid); ok {
			for _, l := range info.Locks {
				resp.Held = append(resp.Held, uint64(l.ID))
			}
		}
	})
	return resp, nil
}

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
	mb.work.begin(req.GetLockId())
	defer mb.work.end(req.GetLockId())
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
		resp := granted(k.lock, r.Token, mode, permits)
		if ctx.Err() != nil { // gone before it heard: nobody holds it for the client
			u.withdraw(ctx, mb, k)
		}
		return resp, nil
	}
	return u.await(ctx, mb, k, mode, permits, pollFor)
}

// await waits for the outcome of queued request k.
func (u unary) await(ctx context.Context, mb *mailbox, k lockKey, mode dlmpb.Mode, permits uint32, poll time.Duration) (*dlmpb.AcquireResponse, error) {
	w := mb.watch(k)
	last := true
	defer func() {
		if last = mb.unwatch(k, w); last && ctx.Err() != nil {
			u.withdraw(ctx, mb, k)
		}
	}()
	if resp, done := u.current(k, mode, permits); done {
		return resp, nil
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
			return granted(k.lock, e.GetToken(), e.GetMode(), e.GetPermits()), nil
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

// withdraw takes back the request k of a client that hung up while it
// waited: a new request is released (whether still queued, or granted
// meanwhile); a conversion is cancelled (if it was granted meanwhile, the
// lock keeps its new mode, and KeepAlive reports the grant).
func (u unary) withdraw(ctx context.Context, mb *mailbox, k lockKey) {
	var cmd *dlmpb.Command
	if k.conversion {
		cmd = &dlmpb.Command{Op: &dlmpb.Command_Cancel{Cancel: &dlmpb.CancelCmd{Session: uint64(mb.sid), LockId: k.lock}}}
	} else {
		cmd = &dlmpb.Command{Op: &dlmpb.Command_Release{Release: &dlmpb.ReleaseCmd{Session: uint64(mb.sid), LockId: k.lock}}}
		mb.forget(k.lock)
	}
	mb.work.begin(k.lock)
	defer mb.work.end(k.lock)
	if _, err := u.propose(ctx, cmd); err != nil {
		u.s.log.Warn("dlm server: withdrawing the request of a client that hung up", "session", mb.sid, "lock", k.lock, "err", err)
	}
	u.s.metrics.withdrawn.Inc()
}

// Release releases a lock.
func (u unary) Release(ctx context.Context, req *dlmpb.ReleaseLockRequest) (*dlmpb.ReleaseLockResponse, error) {
	_, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	cmd := &dlmpb.Command{Op: &dlmpb.Command_Release{Release: &dlmpb.ReleaseCmd{Session: uint64(sid), LockId: req.GetLockId()}}}
	if token, ok := u.releaseEarly(ctx, sid, mb, cmd); ok {
		return &dlmpb.ReleaseLockResponse{Token: token}, nil
	}
	mb.work.begin(req.GetLockId())
	r, err := u.propose(ctx, cmd)
	mb.work.end(req.GetLockId())
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, refuse(r.Err)
	}
	mb.forget(req.GetLockId())
	token := r.Token
	for _, e := range r.Events {
		if token == 0 && e.Kind == locktable.EventReleased && uint64(e.Lock) == req.GetLockId() {
			token = e.Token
		}
	}
	return &dlmpb.ReleaseLockResponse{Token: token}, nil
}

// Cancel withdraws the queued part of a lock: a request not granted yet
// (the lock is then gone), or a pending conversion (the lock keeps its
// mode).
func (u unary) Cancel(ctx context.Context, req *dlmpb.CancelLockRequest) (*dlmpb.CancelLockResponse, error) {
	_, sid, mb, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	mb.work.begin(req.GetLockId())
	defer mb.work.end(req.GetLockId())
	r, err := u.propose(ctx, &dlmpb.Command{Op: &dlmpb.Command_Cancel{Cancel: &dlmpb.CancelCmd{Session: uint64(sid), LockId: req.GetLockId()}}})
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, refuse(r.Err)
	}
	resp := &dlmpb.CancelLockResponse{}
	for _, e := range r.Events {
		if e.Kind == locktable.EventCancelled && uint64(e.Lock) == req.GetLockId() {
			resp.Conversion = e.Conversion
		}
	}
	return resp, nil
}

// releaseEarly answers release cmd of session sid before it is applied,
// as a stream's release is (see releaseEarly of the stream): if the lock
// is granted to the session in the applied state, nobody waits on its
// resource and no other call of the session naming the lock is in flight.
// The release is submitted lazily and the caller answers at once with the
// grant's token. If the entry is lost with a leader, the lock stays with
// the session, and KeepAlive lists it among the session's locks (held),
// where the client finds a lock it released and releases it again.
func (u unary) releaseEarly(ctx context.Context, sid locktable.SessionID, mb *mailbox, cmd *dlmpb.Command) (uint64, bool) {
	lock := cmd.GetRelease().GetLockId()
	if !mb.work.idle(lock) {
		return 0, false
	}
	var info locktable.LockInfo
	ok, waiters := false, 0
	u.s.node.FSM().Read(func(v fsm.View) {
		if info, ok = v.Table().Describe(locktable.LockID(lock)); ok {
			waiters = v.Table().Waiters(info.Resource)
		}
	})
	if !ok || info.Session != sid || info.State != locktable.LockGranted || waiters > 0 {
		return 0, false
	}
	mb.work.begin(lock)
	done := func(_ []fsm.Result, err error) {
		mb.work.end(lock)
		if err != nil {
			u.s.log.Warn("dlm server: a release answered early was not applied; the session's next keepalive lists the lock", "session", sid, "lock", lock, "err", err)
		}
	}
	if err := u.s.node.SubmitLazy(context.WithoutCancel(ctx), lazyRelease, done, cmd); err != nil {
		mb.work.end(lock)
		return 0, false
	}
	mb.forget(lock)
	u.s.metrics.earlyReleases.Inc()
	return info.Token, true
}

// List lists resources, as DLM.List.
func (u unary) List(ctx context.Context, req *dlmpb.ListRequest) (*dlmpb.ListResponse, error) {
	if _, err := u.caller(ctx); err != nil {
		return nil, err
	}
	if err := protocol.ValidateList(req); err != nil {
		return nil, refuse(err)
	}
	return u.s.List(ctx, req)
}

// CloseSession ends a session.
func (u unary) CloseSession(ctx context.Context, req *dlmpb.CloseSessionRequest) (*dlmpb.CloseSessionResponse, error) {
	_, sid, _, err := u.session(ctx, req.GetSession())
	if err != nil {
		return nil, err
	}
	r, err := u.propose(ctx, &dlmpb.Command{Op: &dlmpb.Command_CloseSession{CloseSession: &dlmpb.CloseSessionCmd{Session: uint64(sid)}}})
	if err != nil {
		return nil, err
	}
	if r.Err != nil {
		return nil, refuse(r.Err)
	}
	return &dlmpb.CloseSessionResponse{}, nil
}

func granted(lock, token uint64, mode dlmpb.Mode, permits uint32) *dlmpb.AcquireResponse {
	if permits > 0 {
		mode = dlmpb.Mode_MODE_UNSPECIFIED
	}
	return &dlmpb.AcquireResponse{Outcome: dlmpb.AcquireResponse_OUTCOME_GRANTED, LockId: lock, Token: token, Mode: mode, Permits: permits}
}

// endedStatus is the error of a call whose mailbox ended with err.
func endedStatus(err error) error {
	if errors.Is(err, errSessionEnded) {
		return &refusal{code: codes.NotFound, reason: dlmpb.Reason_REASON_UNKNOWN_SESSION, msg: err.Error()}
	}
	if errors.Is(err, errReplaced) {
		return status.Error(codes.Aborted, "dlm server: the session was resumed on a Session stream, which serves it now")
	}
	return endStatus(err)
}
