// Package dlm is a distributed lock manager for Go services.
//
// A Client wraps a lock store and gives every store the same policy:
// validation, waiting with backoff and jitter, auto-renewal, lost-lock
// notification and metrics. The stores are the dlm server (package dlmserver;
// `dlm server` runs it), a single Redis (redis), Redlock across several
// Redis masters (redlock), PostgreSQL (postgres), etcd (etcd), and one
// process's memory (memory). Package storeurl opens any of them but the
// last from a URL and returns a ready client:
//
//	locks, store, err := storeurl.NewClient(ctx, "dlm://127.0.0.1:7420")
//	if err != nil {
//		return err
//	}
//	defer store.Close(ctx)
//	err = locks.Do(ctx, "orders/42", func(ctx context.Context, l *dlm.Lease) error {
//		// ctx is cancelled the moment the lock is lost.
//		return charge(ctx, l.Token()) // pass the fencing token to the resource
//	}, dlm.WithTTL(10*time.Second), dlm.WithWait(5*time.Second))
//
// Every grant carries a fencing token. A lease knows when it is lost: Lost()
// is closed and Err() says why, and the client-side deadline is always the
// conservative one (request start + TTL - drift), never the store's view.
//
// Errors are values to branch on with errors.Is: ErrNotAcquired (someone else
// held the lock until the wait ran out), ErrUnavailable (the store could not
// be reached), ErrLost, ErrNotHeld, ErrInvalid and ErrUnsupported. Contention
// is never reported as an outage, nor an outage as contention.
package dlm
