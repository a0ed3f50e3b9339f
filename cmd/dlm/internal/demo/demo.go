// Package demo is `dlm demo`: the story dlm was written for, end to end,
// with no setup.
//
// It starts a dlm server in process (one node, in-memory log, free loopback
// ports) and a database (its own in-memory tables, or PostgreSQL), and lets
// several service instances, each with its own dlm session, sell the
// last items of a product. A purchase reads the stock, works a little (which
// widens the race window), writes the stock it computed and records an
// order. It plays three acts:
//
//  1. without a lock: the instances oversell;
//  2. with each purchase inside Client.Do on "product:<id>": orders equal
//     the stock exactly;
//  3. fencing: a holder pauses past its TTL, a second instance takes the
//     lock with a greater token and sells; the first wakes and writes, and
//     the database rejects the stale token.
package demo

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/raft"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/server"
	"github.com/dlmhq/dlm/server/raftnode"
)

// Defaults and bounds of Config.
const (
	DefaultInstances = 8
	DefaultStock     = 5
	DefaultWork      = 20 * time.Millisecond
	DefaultTTL       = 300 * time.Millisecond
	MaxInstances     = 64
	MaxStock         = 100
)

// ErrInvalidConfig is matched (errors.Is) by the errors of Config.Validate.
var ErrInvalidConfig = errors.New("demo: invalid configuration")

// Config configures a run. The zero value is the default demo.
type Config struct {
	// Instances is how many service instances sell concurrently, each with
	// its own database pool and dlm session: 2 to MaxInstances, default
	// DefaultInstances.
	Instances int
	// Stock is how many items are left when acts 1 and 2 begin: 1 to
	// MaxStock, default DefaultStock. Act 3 sells the last one item.
	Stock int
	// DatabaseURL is a PostgreSQL URL (postgres://...). Empty means the
	// demo's own database: two tables in memory, each read and each write
	// one atomic statement, as in a database.
	DatabaseURL string
	// Work is the pause between reading the stock and writing it back;
	// default DefaultWork.
	Work time.Duration
	// TTL is the lease TTL of the holder that pauses in act 3; default
	// DefaultTTL.
	TTL time.Duration
	// Logger receives the logs of the server, the clients and the demo;
	// nil discards them.
	Logger *slog.Logger
}

func (c *Config) setDefaults() {
	if c.Instances == 0 {
		c.Instances = DefaultInstances
	}
	if c.Stock == 0 {
		c.Stock = DefaultStock
	}
	if c.Work == 0 {
		c.Work = DefaultWork
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
}

// Validate checks the configuration, with zero fields taking their
// defaults.
func (c Config) Validate() error {
	c.setDefaults()
	switch {
	case c.Instances < 2 || c.Instances > MaxInstances:
		return fmt.Errorf("%w: instances %d: want 2 to %d", ErrInvalidConfig, c.Instances, MaxInstances)
	case c.Stock < 1 || c.Stock > MaxStock:
		return fmt.Errorf("%w: stock %d: want 1 to %d", ErrInvalidConfig, c.Stock, MaxStock)
	case c.Work < 0 || c.Work > 5*time.Second:
		return fmt.Errorf("%w: work %s: want at most 5s", ErrInvalidConfig, c.Work)
	case c.TTL < dlm.MinTTL || c.TTL > 10*time.Second:
		return fmt.Errorf("%w: TTL %s: want %s to 10s", ErrInvalidConfig, c.TTL, dlm.MinTTL)
	case c.DatabaseURL != "" && !strings.HasPrefix(c.DatabaseURL, "postgres://") && !strings.HasPrefix(c.DatabaseURL, "postgresql://"):
		return fmt.Errorf("%w: database %q: want a postgres:// URL, or nothing for the in-memory database", ErrInvalidConfig, redact(c.DatabaseURL))
	}
	return nil
}

// Report is the outcome of a run. Durations are in nanoseconds in JSON.
type Report struct {
	Database string        `json:"database"` // "memory" or "PostgreSQL"
	Server   string        `json:"server"`   // the embedded dlm server's gRPC address
	Unlocked Act           `json:"unlocked"` // act 1
	Locked   Act           `json:"locked"`   // act 2
	Fencing  Fencing       `json:"fencing"`  // act 3
	Elapsed  time.Duration `json:"elapsed_ns"`
}

// Act is the outcome of act 1 or 2: every instance sells until it reads a
// stock of zero (or has sold as many items as there were).
type Act struct {
	Product   string        `json:"product"`
	Instances int           `json:"instances"`
	Stock     int           `json:"stock"`            // at the start
	Orders    int           `json:"orders"`           // recorded
	StockLeft int           `json:"stock_left"`       // at the end, as the database says
	Oversold  int           `json:"oversold"`         // orders beyond the stock
	Tokens    []uint64      `json:"tokens,omitempty"` // fencing tokens of the orders, in the order they were recorded (act 2)
	Elapsed   time.Duration `json:"elapsed_ns"`
}

// Fencing is the outcome of act 3.
type Fencing struct {
	Resource      string        `json:"resource"`
	TTL           time.Duration `json:"ttl_ns"`         // of the stale holder's lease, not renewed
	StaleToken    uint64        `json:"stale_token"`    // the first holder's
	FreshToken    uint64        `json:"fresh_token"`    // the second holder's
	TakeOver      time.Duration `json:"takeover_ns"`    // from the first grant to the second
	Pause         time.Duration `json:"pause_ns"`       // how long the first holder was paused
	StaleLost     bool          `json:"stale_lost"`     // its lease had reported Lost when it woke
	StaleLoss     string        `json:"stale_loss"`     // why (Lease.Err)
	FreshAccepted bool          `json:"fresh_accepted"` // the second holder's write
	StaleAccepted bool          `json:"stale_accepted"` // the first holder's write after its pause
	Fence         uint64        `json:"fence"`          // the product's fence at the end
	Orders        int           `json:"orders"`
	StockLeft     int           `json:"stock_left"`
	Elapsed       time.Duration `json:"elapsed_ns"`
}

// Problems lists what came out wrong, which would be a bug in dlm or in the
// demo: an oversell or a missed sale with the lock, tokens that did not
// grow, a stale write accepted. Act 1 overselling is the point of the demo,
// not a problem (and it not overselling is only luck).
func (r *Report) Problems() []string {
	var p []string
	l := r.Locked
	if l.Oversold > 0 {
		p = append(p, fmt.Sprintf("with the lock, %d items were oversold", l.Oversold))
	}
	if l.Orders != l.Stock || l.StockLeft != 0 {
		p = append(p, fmt.Sprintf("with the lock, %d orders for %d items and %d left (want %d orders, none left)", l.Orders, l.Stock, l.StockLeft, l.Stock))
	}
	for i := 1; i < len(l.Tokens); i++ {
		if l.Tokens[i] <= l.Tokens[i-1] {
			p = append(p, fmt.Sprintf("with the lock, order %d has token %d after token %d", i+1, l.Tokens[i], l.Tokens[i-1]))
			break
		}
	}
	f := r.Fencing
	if f.FreshToken <= f.StaleToken {
		p = append(p, fmt.Sprintf("fencing: the second grant's token %d is not above the first's %d", f.FreshToken, f.StaleToken))
	}
	if !f.FreshAccepted {
		p = append(p, fmt.Sprintf("fencing: the current holder's write (token %d) was rejected", f.FreshToken))
	}
	if f.StaleAccepted {
		p = append(p, fmt.Sprintf("fencing: the stale write (token %d) was accepted after token %d", f.StaleToken, f.FreshToken))
	}
	if f.Orders != 1 || f.StockLeft != 0 {
		p = append(p, fmt.Sprintf("fencing: %d orders for the last item, %d left (want 1 order, none left)", f.Orders, f.StockLeft))
	}
	return p
}

// instance is one service instance: its own database pool and dlm session.
type instance struct {
	id    int
	db    conn
	store *dlmserver.Store
	locks *dlm.Client
}

// run is the state of one Run.
type run struct {
	cfg       Config
	log       *slog.Logger
	w         io.Writer
	srv       *server.Server
	shop      shop
	instances []*instance
}

// Run plays the demo, writes its report to w (nil: nowhere) act by act, and
// returns it. It returns an error if the demo could not be played (bad
// configuration, database unreachable, ctx ended); a report whose Problems
// are not empty is not an error. Everything it starts is stopped and its
// temporary files are removed before it returns.
func Run(ctx context.Context, cfg Config, w io.Writer) (rep Report, err error) {
	if err := cfg.Validate(); err != nil {
		return rep, err
	}
	cfg.setDefaults()
	if w == nil {
		w = io.Discard
	}
	start := time.Now()
	r := &run{cfg: cfg, log: cfg.Logger, w: w}
	defer func() { err = errors.Join(err, r.close(ctx)) }()
	if err := r.setup(ctx); err != nil {
		return rep, err
	}
	rep.Database, rep.Server = r.shop.kind(), r.srv.Addr()
	r.intro()

	if rep.Unlocked, err = r.rush(ctx, "1", false); err != nil {
		return rep, fmt.Errorf("demo: act 1: %w", err)
	}
	r.printAct("Act 1: no lock", rep.Unlocked, false)
	if rep.Locked, err = r.rush(ctx, "2", true); err != nil {
		return rep, fmt.Errorf("demo: act 2: %w", err)
	}
	r.printAct(fmt.Sprintf("Act 2: each purchase inside c.Do(ctx, %q, ...)", lockName("2")), rep.Locked, true)
	if rep.Fencing, err = r.fencing(ctx, "3"); err != nil {
		return rep, fmt.Errorf("demo: act 3: %w", err)
	}
	r.printFencing(rep.Fencing)
	rep.Elapsed = time.Since(start)
	r.verdict(&rep)
	return rep, nil
}

// setup starts the server, opens the database and connects the instances.
func (r *run) setup(ctx context.Context) error {
	fast := 50 * time.Millisecond
	srv, err := server.Start(server.Config{
		Node: raftnode.Config{InMemory: true, Raft: func(c *raft.Config) {
			c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = fast, fast, fast
		}},
		Logger: r.log,
	})
	if err != nil {
		return fmt.Errorf("demo: start the dlm server: %w", err)
	}
	r.srv = srv
	wctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	if err := srv.WaitReady(wctx); err != nil {
		return err
	}
	r.log.Info("demo: dlm server ready", "addr", srv.Addr())

	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	if r.shop, err = openShop(wctx, r.cfg.DatabaseURL, hex.EncodeToString(b[:])); err != nil {
		return err
	}
	for i := range r.cfg.Instances {
		in := &instance{id: i + 1}
		r.instances = append(r.instances, in)
		if in.db, err = r.shop.connect(); err != nil {
			return err
		}
		in.store, err = dlmserver.Dial(wctx, srv.Addr(), dlmserver.WithLabel("demo instance "+strconv.Itoa(in.id)), dlmserver.WithLogger(r.log))
		if err != nil {
			return fmt.Errorf("demo: instance %d: %w", in.id, err)
		}
		in.locks = dlm.New(in.store, dlm.WithLogger(r.log.With("instance", in.id)))
	}
	return nil
}

// close ends the sessions, stops the server and drops the tables.
func (r *run) close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	var errs []error
	for _, in := range r.instances {
		if in.store != nil {
			errs = append(errs, in.store.Close(ctx))
		}
		if in.db != nil {
			errs = append(errs, in.db.Close())
		}
	}
	if r.srv != nil {
		errs = append(errs, r.srv.Close())
	}
	if r.shop != nil {
		errs = append(errs, r.shop.drop(ctx))
	}
	return errors.Join(errs...)
}

// lockName is the lock of a product.
func lockName(product string) string { return "product:" + product }

// rush is act 1 or 2: every instance sells product until it reads a stock
// of zero, with or without the lock. An instance stops after selling the
// whole stock, which bounds act 1.
func (r *run) rush(ctx context.Context, product string, locked bool) (Act, error) {
	a := Act{Product: product, Instances: len(r.instances), Stock: r.cfg.Stock}
	if err := r.shop.addProduct(ctx, product, a.Stock); err != nil {
		return a, err
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	start := time.Now()
	var wg sync.WaitGroup
	for _, in := range r.instances {
		wg.Go(func() {
			if err := r.shopper(ctx, in, product, locked); err != nil {
				cancel(fmt.Errorf("instance %d: %w", in.id, err))
			}
		})
	}
	wg.Wait()
	a.Elapsed = time.Since(start)
	if err := context.Cause(ctx); err != nil {
		return a, err
	}
	o, err := r.shop.outcome(ctx, product)
	if err != nil {
		return a, err
	}
	a.Orders, a.StockLeft, a.Oversold = len(o.tokens), o.stock, max(0, len(o.tokens)-a.Stock)
	if locked {
		a.Tokens = o.tokens
	}
	r.log.Info("demo: act done", "product", product, "locked", locked, "orders", a.Orders, "stock", a.Stock, "elapsed", a.Elapsed)
	return a, nil
}

// shopper is one instance selling product until it sees it sold out.
func (r *run) shopper(ctx context.Context, in *instance, product string, locked bool) error {
	for range r.cfg.Stock {
		var sold bool
		var err error
		if locked {
			err = in.locks.Do(ctx, lockName(product), func(ctx context.Context, l *dlm.Lease) error {
				var berr error
				sold, berr = r.buy(ctx, in, product, l.Token())
				return berr
			}, dlm.WithTTL(10*time.Second))
		} else {
			sold, err = r.buy(ctx, in, product, 0)
		}
		if err != nil || !sold {
			return err
		}
	}
	return nil
}

// buy is one purchase, the naive way: read, work, write what was computed.
// It reports false when the product is sold out.
func (r *run) buy(ctx context.Context, in *instance, product string, token uint64) (bool, error) {
	stock, err := in.db.readStock(ctx, product)
	if err != nil || stock <= 0 {
		return false, err
	}
	if err := sleep(ctx, r.cfg.Work); err != nil {
		return false, err
	}
	return true, in.db.sell(ctx, product, stock-1, in.id, token)
}

// fencing is act 3. Instance 1 takes the lock with a short TTL and no
// renewal, reads the stock and pauses (a GC pause, a stalled VM) until
// instance 2, queued behind it, has been granted the lock after instance
// 1's lease expired, and has sold the last item with its own, greater
// token. Then instance 1 wakes and writes what it computed before its
// pause, with its stale token.
func (r *run) fencing(ctx context.Context, product string) (Fencing, error) {
	f := Fencing{Resource: lockName(product), TTL: r.cfg.TTL}
	if err := r.shop.addProduct(ctx, product, 1); err != nil {
		return f, err
	}
	first, second := r.instances[0], r.instances[1]
	start := time.Now()
	lease, err := first.locks.Acquire(ctx, f.Resource, dlm.WithTTL(f.TTL), dlm.WithAutoRenew(false), dlm.WithWait(10*time.Second))
	if err != nil {
		return f, err
	}
	// By the end the lease is lost, by design, and Release returns the loss.
	defer func() { _ = lease.Release(context.WithoutCancel(ctx)) }()
	f.StaleToken = lease.Token()
	stock, err := first.db.readStock(ctx, product)
	if err != nil {
		return f, err
	}

	type result struct {
		token    uint64
		after    time.Duration
		accepted bool
		err      error
	}
	done := make(chan result, 1)
	go func() {
		var res result
		res.token, res.accepted, res.err = r.takeOver(ctx, second, product, f.Resource)
		res.after = time.Since(start)
		done <- res
	}()
	// The pause: instance 1 does nothing until instance 2 is through,
	// however long that takes (the goroutine ends when ctx does).
	paused := time.Now()
	res := <-done
	f.Pause = time.Since(paused)
	if res.err != nil {
		return f, fmt.Errorf("instance %d: %w", second.id, res.err)
	}
	f.FreshToken, f.FreshAccepted, f.TakeOver = res.token, res.accepted, res.after

	select {
	case <-lease.Lost():
		f.StaleLost = true
		f.StaleLoss = lease.Err().Error()
	default:
	}
	// Instance 1 carries on as if it still held the lock.
	if f.StaleAccepted, err = first.db.sellFenced(ctx, product, stock-1, first.id, f.StaleToken); err != nil {
		return f, fmt.Errorf("instance %d: %w", first.id, err)
	}
	f.Elapsed = time.Since(start)
	o, err := r.shop.outcome(ctx, product)
	if err != nil {
		return f, err
	}
	f.Fence, f.Orders, f.StockLeft = o.fence, len(o.tokens), o.stock
	r.log.Info("demo: fencing done", "stale", f.StaleToken, "fresh", f.FreshToken, "stale_accepted", f.StaleAccepted)
	return f, nil
}

// takeOver is instance 2 in act 3: it waits for the lock, then sells with a
// fenced write. It returns its token and whether the write was accepted.
func (r *run) takeOver(ctx context.Context, in *instance, product, resource string) (token uint64, accepted bool, err error) {
	l, err := in.locks.Acquire(ctx, resource, dlm.WithTTL(10*time.Second), dlm.WithWait(10*time.Second))
	if err != nil {
		return 0, false, err
	}
	defer func() {
		if rerr := l.Release(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()
	stock, err := in.db.readStock(ctx, product)
	if err != nil {
		return l.Token(), false, err
	}
	if stock <= 0 {
		return l.Token(), false, errors.New("the last item was already sold")
	}
	if err := sleep(ctx, r.cfg.Work); err != nil {
		return l.Token(), false, err
	}
	accepted, err = in.db.sellFenced(ctx, product, stock-1, in.id, l.Token())
	return l.Token(), accepted, err
}

// sleep waits for d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
