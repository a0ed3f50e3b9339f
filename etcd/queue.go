package etcd

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// ticket is a request's place in the queue of its resource: its key, as
// created. It is the Handle of a grant.
type ticket struct {
	key      string
	resource string
	owner    string // the request's, whose slot the key is (see slotSet)
	rev      int64  // the key's create revision, the grant's token
	lease    clientv3.LeaseID
	// ss is the session whose lease the key is under, of which the
	// ticket holds a reference; nil for a ticket looked up by its key.
	ss *session
	// renewed is when a request was sent that found the key in place:
	// the grant counts its TTL from then.
	renewed time.Time
	// stop ends the watch of a granted ticket's Blocking channel; nil
	// when there is none (Store.mu).
	stop context.CancelFunc
	// released is set by Release: no watch starts after it (Store.mu).
	released bool
	gone     bool // the key was deleted and the reference given back (Store.mu)
	swept    bool // the store deleted the key after a Release failed (Store.mu)
}

// grant returns the grant of a ticket whose turn has come. Its loss is
// the session's (LostContext, and Lost its Done channel): the grant is
// lost when its session ends (at once if it has ended already), together
// with every grant under the session at that moment.
func (t *ticket) grant() driver.Grant {
	return driver.Grant{Token: uint64(t.rev), Handle: t, Start: t.renewed, Lost: t.ss.lost.Done(), LostContext: t.ss.lost}
}

// kv returns the ticket's key as created.
func (t *ticket) kv() *mvccpb.KeyValue {
	return &mvccpb.KeyValue{Key: []byte(t.key), CreateRevision: t.rev, Lease: int64(t.lease)}
}

// present reports whether kv is the ticket's key as it was created, under
// its lease.
func (t *ticket) present(kv *mvccpb.KeyValue) bool {
	return kv != nil && string(kv.Key) == t.key && kv.CreateRevision == t.rev && kv.Lease == int64(t.lease)
}

// queued reports whether the ticket's key is among kvs.
func (t *ticket) queued(kvs []*mvccpb.KeyValue) bool {
	for _, kv := range kvs {
		if t.present(kv) {
			return true
		}
	}
	return false
}

// blocker returns the last of kvs (sorted by create revision) that was
// created before rev and whose mode conflicts with m, or nil if none does:
// the predecessor that a request in mode m created at rev waits for.
func blocker(kvs []*mvccpb.KeyValue, rev int64, m driver.Mode) *mvccpb.KeyValue {
	for i := len(kvs) - 1; i >= 0; i-- {
		if kv := kvs[i]; kv.CreateRevision < rev && !m.Compatible(modeOf(kv)) {
			return kv
		}
	}
	return nil
}

// queueList is the options of a read of a resource's queue, made once
// (WithSort's option is a closure) and never changed.
var queueList = []clientv3.OpOption{
	clientv3.WithPrefix(),
	clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend),
}

// queueOps are the options of a read of a resource's queue: every key under
// its directory, in create revision order, then opts.
func queueOps(opts ...clientv3.OpOption) []clientv3.OpOption {
	if len(opts) == 0 {
		return queueList
	}
	return append(queueList[:len(queueList):len(queueList)], opts...) // a copy: queueList stays as it is
}

// queue reads the keys of resource created up to rev, in create revision
// order, and returns them with the revision of the read.
func (s *Store) queue(ctx context.Context, resource string, rev int64) ([]*mvccpb.KeyValue, int64, error) {
	cctx, cancel := s.call(ctx)
	defer cancel()
	resp, err := s.cli.Get(cctx, s.dir(resource), queueOps(clientv3.WithMaxCreateRev(rev))...)
	if err != nil {
		return nil, 0, s.fail(ctx, "read queue", err)
	}
	return resp.Kvs, resp.Header.Revision, nil
}
