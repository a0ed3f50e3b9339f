package dlm

import "context"

// Owner groups the acquisitions of one unit of work (a request handler, a
// job, a transaction) so that a store with deadlock detection can see the
// unit as one owner. Without an Owner every acquisition is an owner of its
// own, and the commonest deadlock, A holding x and waiting for y while B
// holds y and waits for x, never forms a cycle in the store's graph: both
// wait until their wait ends. Through Owners, the request that would close
// the cycle fails at once with ErrDeadlock.
//
// The dlm server and the memory store detect deadlocks (across processes
// for the dlm server); other stores ignore the grouping. An Owner is not
// re-entrant: asking again, in a conflicting mode, for a lock it already
// holds makes it wait for itself, which those stores refuse at once with
// ErrDeadlock rather than let it hang; a compatible mode (PR twice) is a
// second lock. Use one Owner per thread of control: two goroutines acting
// for one Owner may be refused as a deadlock when they merely wait for each
// other's locks. An Owner is safe for concurrent use and costs nothing to
// create; it holds no resources of its own.
type Owner struct {
	c  *Client
	id string
}

// Owner returns a new owner of acquisitions on c's store.
func (c *Client) Owner() *Owner { return &Owner{c: c, id: newOwner()} }

// ID returns the owner's identifier: 128 random bits in hex.
func (o *Owner) ID() string { return o.id }

// Acquire is Client.Acquire for this owner.
func (o *Owner) Acquire(ctx context.Context, resource string, opts ...Option) (*Lease, error) {
	return o.c.acquire(ctx, resource, []Option{o.option()}, opts)
}

// Do is Client.Do for this owner.
func (o *Owner) Do(ctx context.Context, resource string, fn func(ctx context.Context, l *Lease) error, opts ...Option) error {
	return o.c.do(ctx, resource, fn, []Option{WithAutoRenew(true), o.option()}, opts)
}

func (o *Owner) option() Option { return func(c *config) { c.group = o.id } }
