package dlm

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlmhq/dlm/driver"
)

// ErrNoLeader means that nobody leads the election.
var ErrNoLeader = errors.New("dlm: no leader")

// Election is a leader election on one store: the candidates of an
// election compete for an exclusive lock on its name, the leader holds it
// (renewed in the background) with its value as the lock's metadata, and
// its fencing token is its term. Terms only grow, so a resource that
// refuses a token lower than one it has seen refuses a deposed leader
// (see the store's guarantees for how tokens grow).
//
// Candidates wait in FIFO order on every store of this module (the dlm
// server, memory, etcd, PostgreSQL, Redis and Redlock queue them).
// Leader needs a store that can read one lock (driver.Inspector: every
// store of this module but those that cannot); Observe is pushed by stores
// that can tell (driver.Watcher) and polled otherwise; Proclaim needs a
// store that can change a held lock's metadata (driver.Relabeler).
//
// An Election is safe for concurrent use; it holds no resources of its own.
type Election struct {
	c    *Client
	name string
	opts []Option
}

// Leader is who leads an election, as a store saw it.
type Leader struct {
	// Value is the leader's value: what it campaigned with, or last
	// proclaimed.
	Value string
	// Term is the leader's fencing token, which grows with every new
	// leader. It is zero when nobody leads (in Observe).
	Term uint64
	// Since is when the leader was elected, where the store knows it.
	Since time.Time
}

// Election returns the election called name on c's store. The options set
// how candidates hold the leadership (WithTTL, WithUnavailableTimeout,
// WithRetry, WithMaxHold, WithWait for how long Campaign waits) and how
// often Observe polls a store that cannot push (WithPollInterval). A
// leadership always renews itself and is always exclusive: WithMode,
// WithSemaphore, WithAutoRenew and WithMetadata are overridden.
//
// The name is a lock's name in the store and follows the rules of resource
// names (MaxResourceBytes); give elections a prefix of their own, such as
// "election/", so that no lock of the application shares one.
func (c *Client) Election(name string, opts ...Option) *Election {
	return &Election{c: c, name: name, opts: opts}
}

// Name returns the election's name.
func (e *Election) Name() string { return e.name }

// config builds the settings of a campaign for value.
func (e *Election) config(value string) (config, error) {
	return e.c.config(e.name, nil, e.campaignOptions(value))
}

func (e *Election) campaignOptions(value string) []Option {
	opts := make([]Option, 0, len(e.opts)+1)
	opts = append(opts, e.opts...)
	return append(opts, func(c *config) {
		c.mode, c.capacity, c.permits = EX, 0, 0
		c.autoRenew = true
		c.metadata = value
	})
}

// Leader returns who leads the election now, or ErrNoLeader. It fails with
// ErrUnsupported on a store that cannot read a lock by its name
// (driver.Inspector).
func (e *Election) Leader(ctx context.Context) (Leader, error) {
	in, err := e.inspector()
	if err != nil {
		return Leader{}, err
	}
	ld, err := e.read(ctx, in)
	if err == nil && ld.Term == 0 {
		err = fmt.Errorf("%w in %q", ErrNoLeader, e.name)
	}
	return ld, err
}

// inspector checks the name and returns the store's Inspector.
func (e *Election) inspector() (driver.Inspector, error) {
	if _, err := e.config(""); err != nil {
		return nil, err
	}
	in, ok := e.c.drv.(driver.Inspector)
	if !ok {
		return nil, fmt.Errorf("%w: the %s store cannot read a lock by its name, so it cannot say who leads", ErrUnsupported, e.c.store)
	}
	return in, nil
}

// read returns the leader as the store sees it now: the exclusive holder
// of the election's lock, or the zero Leader.
func (e *Election) read(ctx context.Context, in driver.Inspector) (Leader, error) {
	info, err := in.Inspect(ctx, e.name)
	if err != nil {
		return Leader{}, err
	}
	for _, h := range info.Holders {
		if h.Mode == EX && h.Permits == 0 {
			return Leader{Value: h.Metadata, Term: h.Token, Since: h.Since}, nil
		}
	}
	return Leader{}, nil
}

// notify tells the election's watchers of a change, on stores whose watch
// needs it (driver.Notifier). It is best effort: watchers of such stores
// also poll.
func (e *Election) notify(ctx context.Context) {
	n, ok := e.c.drv.(driver.Notifier)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := n.Notify(ctx, e.name); err != nil {
		e.c.log.Warn("dlm: election change not announced; observers will see it at their next poll", "store", e.c.store, "election", e.name, "err", err)
	}
}
