package dlm

import (
	"time"
)

// Defaults for the per-call options.
const (
	// DefaultTTL is the time to live of a lock when WithTTL is not given.
	DefaultTTL = 10 * time.Second
	// DefaultUnavailableTimeout is how long a call keeps retrying a store
	// that does not answer when WithUnavailableTimeout is not given.
	DefaultUnavailableTimeout = 30 * time.Second
	// DefaultPollInterval is how often Election.Observe reads a store that
	// cannot push changes when WithPollInterval is not given.
	DefaultPollInterval = time.Second
)

// waitForever is the unset wait: keep trying until the context ends.
const waitForever = time.Duration(-1 << 63)

// config is the settings of one Acquire or Do call. Each call builds its own,
// so nothing is shared between calls through a reused option value.
type config struct {
	ttl       time.Duration
	wait      time.Duration
	retry     RetryStrategy
	autoRenew bool
	maxHold   time.Duration
	mode      Mode
	metadata  string
	capacity  int
	permits   int
	// unavailable bounds continuous unavailability; negative: no bound.
	unavailable time.Duration
	// group is the Owner the call acquires for; empty for none.
	group string
	// poll is how often an election's observer reads a store that cannot
	// push changes.
	poll time.Duration
}

// defaultRetry is the default RetryStrategy, made once: it is stateless.
var defaultRetry = ExponentialBackoff(10*time.Millisecond, time.Second)

func defaultConfig() config {
	return config{
		ttl:   DefaultTTL,
		wait:  waitForever,
		retry: defaultRetry,
		mode:  EX,

		unavailable: DefaultUnavailableTimeout,
		poll:        DefaultPollInterval,
	}
}

// Option sets one setting of an Acquire or Do call. Options given to New
// with WithDefaults apply to every call first.
type Option func(*config)

// WithTTL sets how long the store keeps the lock without a renewal. It must
// lie within [MinTTL, MaxTTL]; the default is DefaultTTL.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithWait sets how long to keep trying while someone else holds the lock.
// Zero means one attempt (try-lock). Without WithWait the call keeps trying
// until its context ends. Either way a store that does not answer is given
// up on after WithUnavailableTimeout.
func WithWait(d time.Duration) Option { return func(c *config) { c.wait = d } }

// WithUnavailableTimeout bounds how long a call keeps retrying a store that
// does not answer: after d of continuous unavailability (no answer at all,
// or only failures) the call gives up with an error that matches
// ErrUnavailable, says for how long the store was unreachable and wraps
// the store's last error. Every answer of the store, even "taken", starts
// the count again: waiting for a lock that someone holds is bounded only by
// WithWait and the context. The default is DefaultUnavailableTimeout.
//
// Zero gives up at the first attempt that fails; a negative d sets no bound,
// so that only the wait and the context end the retries. Give it to New
// with WithDefaults to set it for every call of a client.
func WithUnavailableTimeout(d time.Duration) Option {
	return func(c *config) { c.unavailable = max(d, -1) }
}

// WithRetry sets the pause between attempts for stores that are polled, and
// between attempts on an unreachable store. The default is
// ExponentialBackoff(10ms, 1s) with full jitter.
func WithRetry(s RetryStrategy) Option { return func(c *config) { c.retry = s } }

// WithAutoRenew turns renewal on or off. A renewing lease extends the lock
// every TTL/3 until it is released, lost, or held for the maximum hold. Do
// renews by default; Acquire does not.
func WithAutoRenew(on bool) Option { return func(c *config) { c.autoRenew = on } }

// WithMaxHold bounds how long auto-renewal keeps a lock: after d the lease
// stops renewing and expires at the end of its TTL. Zero, the default, means
// no bound.
func WithMaxHold(d time.Duration) Option { return func(c *config) { c.maxHold = d } }

// WithMode sets the lock mode; the default is EX. A store that cannot
// provide the mode fails with ErrUnsupported.
func WithMode(m Mode) Option { return func(c *config) { c.mode = m } }

// WithMetadata attaches a description of the owner (host, process, purpose)
// that listing tools show. At most MaxMetadataBytes.
func WithMetadata(s string) Option { return func(c *config) { c.metadata = s } }

// WithSemaphore makes the resource a counting semaphore of capacity permits
// and takes permits of them; the default is a plain lock. Every user of one
// resource must agree on its capacity. Stores without semaphores fail with
// ErrUnsupported.
func WithSemaphore(capacity, permits int) Option {
	return func(c *config) { c.capacity, c.permits = capacity, permits }
}

// WithPollInterval sets how often Election.Observe reads the election on a
// store that cannot push changes (see the store's documentation): a change
// of leader is seen within d plus one round trip. It must lie within
// [MinPollInterval, MaxTTL]; the default is DefaultPollInterval. Stores
// that push ignore it.
func WithPollInterval(d time.Duration) Option { return func(c *config) { c.poll = d } }

// WithTracer sets the tracer of Acquire and Release calls, such as
// dlmotel.New(nil) for OpenTelemetry spans. The default, and nil, traces
// nothing.
func WithTracer(t Tracer) ClientOption { return func(c *Client) { c.tracer = t } }
