package locktable

// Default limits, used for every Limits field left at zero.
const (
	// DefaultMaxNameLen is the longest resource name or session label, in
	// bytes.
	DefaultMaxNameLen = 256
	// DefaultMaxLocksPerSession bounds the locks and queued requests of one
	// session.
	DefaultMaxLocksPerSession = 10_000
	// DefaultMaxWaitersPerResource bounds the queued requests plus queued
	// conversions of one resource.
	DefaultMaxWaitersPerResource = 10_000
	// DefaultMaxResources bounds the resources alive at once (locked or with
	// waiters).
	DefaultMaxResources = 1_000_000
	// DefaultMaxSessions bounds the open sessions.
	DefaultMaxSessions = 100_000
	// DefaultMaxLocksPerResource bounds the locks (granted, converting or
	// waiting) of one resource.
	DefaultMaxLocksPerResource = 10_000
	// DefaultMaxLocks bounds the locks (granted, converting or waiting) of
	// the whole table.
	DefaultMaxLocks = 1_000_000
	// DefaultMaxDeadlockSearch bounds the work of one deadlock check, in
	// locks examined.
	DefaultMaxDeadlockSearch = 100_000
)

// Limits bounds the table. Zero fields take the Default values above; there
// is no "unlimited", use a large number. Every replica of a table must use
// the same Limits, since they decide which operations fail.
type Limits struct {
	// MaxNameLen is the longest resource name or session label, in bytes.
	MaxNameLen int
	// MaxLocksPerSession bounds the locks (held or queued) of one session.
	// A conversion does not count as a new lock.
	MaxLocksPerSession int
	// MaxWaitersPerResource bounds the queued requests and conversions of
	// one resource.
	MaxWaitersPerResource int
	// MaxResources bounds the resources alive at once. A resource with no
	// locks and no waiters does not exist.
	MaxResources int
	// MaxSessions bounds the open sessions.
	MaxSessions int
	// MaxLocksPerResource bounds the locks of one resource: granted ones
	// (converting ones included) plus queued new requests. A new request
	// on a resource at the bound fails with ErrTooManyHolders, even in
	// mode NL; a conversion adds no lock and is never refused for it.
	MaxLocksPerResource int
	// MaxLocks bounds the locks (granted or queued) of the whole table,
	// across sessions and resources. A new request with the table at the
	// bound fails with ErrTooManyLocks.
	MaxLocks int
	// MaxDeadlockSearch bounds the number of locks one deadlock check may
	// examine. A check that runs out finds no deadlock (the request is
	// queued and its deadline, if any, is the backstop). The outcome is
	// still deterministic.
	MaxDeadlockSearch int
}

// withDefaults returns l with every non-positive field set to its default.
func (l Limits) withDefaults() Limits {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&l.MaxNameLen, DefaultMaxNameLen)
	def(&l.MaxLocksPerSession, DefaultMaxLocksPerSession)
	def(&l.MaxWaitersPerResource, DefaultMaxWaitersPerResource)
	def(&l.MaxResources, DefaultMaxResources)
	def(&l.MaxSessions, DefaultMaxSessions)
	def(&l.MaxLocksPerResource, DefaultMaxLocksPerResource)
	def(&l.MaxLocks, DefaultMaxLocks)
	def(&l.MaxDeadlockSearch, DefaultMaxDeadlockSearch)
	return l
}
