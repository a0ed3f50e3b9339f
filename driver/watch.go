package driver

import "context"

// Inspector is implemented by stores that can read one resource, by its
// exact name, in one cheap call: what dlm.Election uses to say who leads.
type Inspector interface {
	// Inspect returns the resource named exactly resource as it stands:
	// its holders, with their metadata, token and the time they were
	// granted where the store knows it, and its waiters where the store
	// can see them. A free resource has no holders and no waiters; that is
	// not an error.
	Inspect(ctx context.Context, resource string) (ResourceInfo, error)
}

// Watcher is implemented by stores that can tell a client when a resource
// changes, so that it need not poll.
type Watcher interface {
	// Watch returns a channel that receives a value soon after each change
	// of the resource's holders or of their metadata. Signals coalesce:
	// several changes may give one value, and the receiver reads the
	// resource again with Inspect. Every change made after Watch returns
	// is signalled, so a caller that watches and then inspects misses
	// none. A store whose own notifications cannot see every change (a
	// holder that vanished without telling anyone) also signals at a
	// bounded interval, which it documents. The channel is closed when
	// ctx ends or the watch breaks (the store could not be reached); the
	// caller may watch again.
	Watch(ctx context.Context, resource string) (<-chan struct{}, error)
}

// Notifier is implemented by stores whose Watch relies on the changers of a
// resource to announce their changes (a publish on Redis, a NOTIFY on
// PostgreSQL), instead of seeing every change itself.
type Notifier interface {
	// Notify tells the resource's watchers that it changed.
	Notify(ctx context.Context, resource string) error
}

// Relabeler is implemented by stores that can change the metadata of a
// held lock in place, without releasing it: what dlm.Leadership.Proclaim
// uses to change a leader's value.
type Relabeler interface {
	// Relabel sets the metadata of the lock granted as g to metadata, if
	// req.Owner still holds it; otherwise it returns ErrNotHeld. Readers
	// (Inspect, List) see the new metadata once Relabel returns.
	Relabel(ctx context.Context, req Request, g Grant, metadata string) error
}
