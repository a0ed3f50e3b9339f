package etcd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

var _ driver.Lister = (*Store)(nil)

const (
	// listPage is the number of keys read by each call of a listing.
	listPage = 1000
	// listLookups is the number of lease lookups a listing runs at once.
	listLookups = 8
)

// unescaper reverses escaper.
var unescaper = strings.NewReplacer("%2F", "/", "%25", "%")

// List returns the resources whose name starts with prefix that have a
// request queued, sorted by name, at most limit of them.
//
// It reads every key under the store's prefix and the escaped name prefix,
// in pages of 1000 keys, all at the revision of the first page, so the
// queues are seen as they stood at one moment; then it looks up the TTL of
// the holders' leases, for the resources returned only. etcd sorts keys by
// their escaped form, not by name, so a listing reads every matching key
// whatever the limit. Each call to etcd is bounded by the request timeout.
//
// Holders are the requests that the store considers granted: no request
// created before them holds or waits for a mode that conflicts with their
// own. They show their owner id, mode, metadata, token (the key's create
// revision, the grant's token) and TTL: the time left on the session's
// lease, which etcd counts in whole seconds (rounded down) and which may
// exceed the TTL asked for, as leases last the TTL rounded up to whole
// seconds and at least etcd's minimum. A lease that ended between the read
// and its lookup shows a TTL of 0. Waiters are the other requests, in
// create revision order (arrival order), with their owner id, mode and
// metadata. etcd does not record when a key was created, so Since is zero.
func (s *Store) List(ctx context.Context, prefix string, limit int) ([]driver.ResourceInfo, error) {
	if s.bad != nil {
		return nil, s.bad
	}
	if limit <= 0 {
		return nil, fmt.Errorf("%w: list limit %d is not positive", driver.ErrInvalid, limit)
	}
	queues, err := s.readQueues(ctx, prefix)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(queues))
	for name := range queues {
		names = append(names, name)
	}
	slices.Sort(names)
	names = names[:min(len(names), limit)]

	out := make([]driver.ResourceInfo, len(names))
	var leases []clientv3.LeaseID // of the holders, in order
	for i, name := range names {
		var held []clientv3.LeaseID
		out[i], held = s.resourceInfo(name, queues[name])
		leases = append(leases, held...)
	}
	ttls, err := s.leaseTTLs(ctx, leases)
	if err != nil {
		return nil, err
	}
	for i := range out {
		for j := range out[i].Holders {
			out[i].Holders[j].TTL, ttls = ttls[0], ttls[1:]
		}
	}
	return out, nil
}

// resourceInfo returns the resource name as its queue kvs shows it, and
// the leases of its holders, in order: the requests that no request created
// before them conflicts with hold the lock, the others wait, in create
// revision order. It sorts kvs by create revision. TTLs are left zero.
func (s *Store) resourceInfo(name string, kvs []*mvccpb.KeyValue) (driver.ResourceInfo, []clientv3.LeaseID) {
	slices.SortFunc(kvs, func(a, b *mvccpb.KeyValue) int { return cmp.Compare(a.CreateRevision, b.CreateRevision) })
	info := driver.ResourceInfo{Resource: name}
	var leases []clientv3.LeaseID
	for _, kv := range kvs {
		m := modeOf(kv)
		_, owner, meta := parseValue(kv)
		if blocker(kvs, kv.CreateRevision, m) != nil {
			info.Waiters = append(info.Waiters, driver.WaiterInfo{Owner: owner, Mode: m, Metadata: meta})
			continue
		}
		info.Holders = append(info.Holders, driver.HolderInfo{
			Owner: owner, Mode: m, Token: uint64(kv.CreateRevision), Metadata: meta,
		})
		leases = append(leases, clientv3.LeaseID(kv.Lease))
	}
	return info, leases
}

// readQueues reads the keys of the resources whose names start with
// prefix, at one revision, and returns them by resource name.
func (s *Store) readQueues(ctx context.Context, prefix string) (map[string][]*mvccpb.KeyValue, error) {
	from := s.prefix + escaper.Replace(prefix)
	end := clientv3.GetPrefixRangeEnd(from)
	if from == "" {
		from = "\x00" // with end "\x00": every key
	}
	queues := make(map[string][]*mvccpb.KeyValue)
	var rev int64
	for {
		opts := []clientv3.OpOption{
			clientv3.WithRange(end), clientv3.WithLimit(listPage),
			clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend),
		}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev))
		}
		cctx, cancel := s.call(ctx)
		resp, err := s.cli.Get(cctx, from, opts...)
		cancel()
		if err != nil {
			return nil, s.fail(ctx, "list", err)
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			if name, ok := s.nameOf(string(kv.Key)); ok && strings.HasPrefix(name, prefix) {
				queues[name] = append(queues[name], kv)
			}
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return queues, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// nameOf returns the resource of a request's key, prefix + escaped name +
// "/" + owner, and false for a key of another shape. Like the store's reads
// of a queue, it takes every key under the resource's directory as one of
// its requests.
func (s *Store) nameOf(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, s.prefix)
	if !ok {
		return "", false
	}
	esc, _, ok := strings.Cut(rest, "/")
	if !ok || esc == "" {
		return "", false
	}
	return unescaper.Replace(esc), true
}

// leaseTTLs looks up the time left on each lease, listLookups at a time,
// each lookup bounded by the request timeout. A lease that is gone, or the
// zero lease, has 0 left.
func (s *Store) leaseTTLs(ctx context.Context, ids []clientv3.LeaseID) ([]time.Duration, error) {
	ttls := make([]time.Duration, len(ids))
	errs := make([]error, len(ids))
	sem := make(chan struct{}, listLookups)
	var wg sync.WaitGroup
	for i, id := range ids {
		if id == clientv3.NoLease {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			cctx, cancel := s.call(ctx)
			defer cancel()
			resp, err := s.cli.TimeToLive(cctx, id)
			switch {
			case errors.Is(err, rpctypes.ErrLeaseNotFound):
			case err != nil:
				errs[i] = err
			case resp.TTL > 0:
				ttls[i] = time.Duration(resp.TTL) * time.Second
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, s.fail(ctx, "list: lease lookup", err)
	}
	return ttls, nil
}
