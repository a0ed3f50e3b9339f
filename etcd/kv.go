package etcd

import (
	"context"
	"math"
	"reflect"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
)

// kv sends the calls of every cycle: the transaction that creates a
// request's key, and the delete that releases it (or a transaction of
// deletes, see deletes.go). When the client's KV is
// its own, they go straight to etcd's KV service on the client's
// connection: the same gRPC calls, through the same interceptors (retries,
// authentication) and with clientv3's default call options, without
// building clientv3's Op values and converting them to the messages (docs/
// stores.md: about 1.5% of an uncontended cycle). A KV that the user
// replaced (a namespace, a tracing wrapper) gets them instead, as it gets
// every other call. Two things the type of cli.KV cannot tell: a KV that
// clientv3.NewKVFromKVClient made over another KV service looks like the
// client's own, and the message sizes set in the client's Config are not
// the direct calls' (they use clientv3's defaults).
type kv struct {
	direct pb.KVClient // nil: through cli.KV
	cli    *clientv3.Client
}

// defaultCallOptions are clientv3's call options when its configuration
// sets no message size: wait for a connection rather than fail at once,
// send up to 2 MiB, receive any size.
var defaultCallOptions = []grpc.CallOption{
	grpc.WaitForReady(true),
	grpc.MaxCallSendMsgSize(2 << 20),
	grpc.MaxCallRecvMsgSize(math.MaxInt32),
}

// newKV returns the kv of cli, direct when cli.KV is what clientv3.New
// made it.
func newKV(cli *clientv3.Client) kv {
	k := kv{cli: cli}
	if conn := cli.ActiveConnection(); conn != nil && reflect.TypeOf(cli.KV) == reflect.TypeOf(clientv3.NewKV(cli)) {
		k.direct = pb.NewKVClient(conn)
	}
	return k
}

// txn commits r: its comparisons, then its success or failure requests,
// which are puts, reads and deletes (ops says what the other path handles).
func (k kv) txn(ctx context.Context, r *pb.TxnRequest) (*pb.TxnResponse, error) {
	if k.direct != nil {
		resp, err := k.direct.Txn(ctx, r, defaultCallOptions...)
		return resp, clientv3.ContextError(ctx, err)
	}
	cmps := make([]clientv3.Cmp, len(r.Compare))
	for i, c := range r.Compare {
		cmps[i] = clientv3.FromCompare(c)
	}
	resp, err := k.cli.Txn(ctx).If(cmps...).Then(ops(r.Success)...).Else(ops(r.Failure)...).Commit()
	return (*pb.TxnResponse)(resp), err
}

// deletePrev deletes key and returns it as it was.
func (k kv) deletePrev(ctx context.Context, key string) (*pb.DeleteRangeResponse, error) {
	if k.direct != nil {
		resp, err := k.direct.DeleteRange(ctx, &pb.DeleteRangeRequest{Key: []byte(key), PrevKv: true}, defaultCallOptions...)
		return resp, clientv3.ContextError(ctx, err)
	}
	resp, err := k.cli.Delete(ctx, key, clientv3.WithPrevKV())
	return (*pb.DeleteRangeResponse)(resp), err
}

// ops turns the requests the store puts in a transaction back into
// clientv3's Ops: a put under a lease, a read of a range in an order, a
// delete of a key that returns it.
func ops(rs []*pb.RequestOp) []clientv3.Op {
	out := make([]clientv3.Op, 0, len(rs))
	for _, r := range rs {
		switch r := r.Request.(type) {
		case *pb.RequestOp_RequestPut:
			p := r.RequestPut
			out = append(out, clientv3.OpPut(string(p.Key), string(p.Value), clientv3.WithLease(clientv3.LeaseID(p.Lease))))
		case *pb.RequestOp_RequestRange:
			g := r.RequestRange
			out = append(out, clientv3.OpGet(string(g.Key), clientv3.WithRange(string(g.RangeEnd)),
				clientv3.WithSort(clientv3.SortTarget(g.SortTarget), clientv3.SortOrder(g.SortOrder))))
		case *pb.RequestOp_RequestDeleteRange:
			out = append(out, clientv3.OpDelete(string(r.RequestDeleteRange.Key), clientv3.WithPrevKV()))
		}
	}
	return out
}

// putOp is the request that creates key with value under lease.
func putOp(key, value string, lease clientv3.LeaseID) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestPut{RequestPut: &pb.PutRequest{
		Key: []byte(key), Value: []byte(value), Lease: int64(lease)}}}
}

// listOp is the read of the queue under dir (a resource's directory, see
// Store.dir): every key under it, in create revision order. It is the read
// that queueOps's options make through cli.KV, as a message.
func listOp(dir string) *pb.RequestOp {
	return &pb.RequestOp{Request: &pb.RequestOp_RequestRange{RequestRange: &pb.RangeRequest{
		Key: []byte(dir), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(dir)),
		SortOrder: pb.RangeRequest_ASCEND, SortTarget: pb.RangeRequest_CREATE}}}
}

// absent is the comparison that no key from key up to end (excluded; none:
// key alone) exists: their create revision is 0.
func absent(key, end string) *pb.Compare {
	c := &pb.Compare{Target: pb.Compare_CREATE, Result: pb.Compare_EQUAL, Key: []byte(key),
		TargetUnion: &pb.Compare_CreateRevision{}}
	if end != "" {
		c.RangeEnd = []byte(end)
	}
	return c
}
