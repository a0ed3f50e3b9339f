package etcd

import "time"

// Option configures a Store.
type Option func(*Store)

// WithPrefix sets the prefix of every key the store writes; the default is
// "dlm/". Stores that share a prefix share their locks.
func WithPrefix(p string) Option { return func(s *Store) { s.prefix = p } }

// WithRequestTimeout bounds each call to etcd (a grant, a transaction, a
// read, a keep-alive, a revoke, the creation of a watch); the default is
// 5 s. A call that runs out of it is driver.ErrUnavailable. It does not
// bound a wait: AcquireWait waits as long as its context allows.
func WithRequestTimeout(d time.Duration) Option { return func(s *Store) { s.timeout = d } }
