package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/storeurl"
)

// MaxListLimit is the most resources `dlm ls` shows.
const maxListLimit = 100000

const lsUsage = `Usage: dlm ls [flags]

Lists the resources of a store that have a holder or a waiter: each holder
with its mode, fencing token, time to live left and how long it has held the
lock, then the waiters in queue order. What a store can show varies (see the
README); unknown values are "-". A listing is a snapshot: it may be stale by
the time it is printed.

Flags:
`

// lsFlags are the settings of `dlm ls`.
type lsFlags struct {
	store, prefix string
	limit         int
	json          bool
}

func runLs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var f lsFlags
	fs := flag.NewFlagSet("dlm ls", flag.ContinueOnError)
	fs.StringVar(&f.store, "store", env("DLM_STORE", storeurl.DefaultURL), "store URL (env DLM_STORE)")
	fs.StringVar(&f.prefix, "prefix", "", "only resources whose name starts with this")
	fs.IntVar(&f.limit, "limit", 1000, "show at most this many resources")
	fs.BoolVar(&f.json, "json", false, "print JSON instead of a table")
	if code, ok := parseFlags(fs, args, lsUsage, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dlm ls: unexpected arguments %q (use --prefix to filter)\n", fs.Args())
		return exitUsage
	}
	if f.limit < 1 || f.limit > maxListLimit {
		fmt.Fprintf(stderr, "dlm ls: --limit %d: want 1 to %d\n", f.limit, maxListLimit)
		return exitUsage
	}
	store, code := openForListing(ctx, "dlm ls", f.store, stderr)
	if store == nil {
		return code
	}
	defer closeStore(store)
	lister, ok := store.Driver().(driver.Lister)
	if !ok {
		fmt.Fprintf(stderr, "dlm ls: the %s store cannot list its locks\n", store.Kind())
		return 1
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	res, err := lister.List(cctx, f.prefix, f.limit)
	if err != nil {
		fmt.Fprintf(stderr, "dlm ls: %s\n", userMessage(store.Spec().Unreachable(err, time.Since(start))))
		if denied(err) {
			return exitDenied
		}
		if errors.Is(err, driver.ErrUnsupported) || errors.Is(err, driver.ErrInvalid) {
			return exitUsage
		}
		return exitUnavailable
	}
	if f.json {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(listJSON(res))
		return 0
	}
	printList(stdout, res, time.Now())
	if len(res) == f.limit {
		fmt.Fprintf(stdout, "(the first %d; raise --limit or narrow --prefix for more)\n", f.limit)
	}
	return 0
}

// openForListing opens a store for a read-only command, or returns the exit
// code.
func openForListing(ctx context.Context, cmd, url string, stderr io.Writer) (*storeurl.Store, int) {
	if _, err := storeurl.Parse(url); err != nil {
		fmt.Fprintf(stderr, "%s: --store: %s\n", cmd, userMessage(err))
		return nil, exitUsage
	}
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	store, err := storeurl.Open(octx, url, storeOptions(cmd)...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", cmd, userMessage(err))
		if errors.Is(err, driver.ErrInvalid) { // a bad URL, or a file it names
			return nil, exitUsage
		}
		return nil, storeExit(err)
	}
	return store, 0
}

// closeStore closes a store, briefly.
func closeStore(s *storeurl.Store) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.Close(ctx)
}

// printList prints resources as a table: a line per holder, then one per
// waiter.
func printList(w io.Writer, res []driver.ResourceInfo, now time.Time) {
	if len(res) == 0 {
		fmt.Fprintln(w, "no locks")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "RESOURCE\tSTATE\tMODE\tTOKEN\tTTL\tFOR\tOWNER\tMETADATA")
	for _, r := range res {
		name := r.Resource
		for _, h := range r.Holders {
			fmt.Fprintf(tw, "%s\theld\t%s\t%s\t%s\t%s\t%s\t%s\n", quote(name), modeOf(r, h.Mode, h.Permits),
				dash(h.Token), dur(h.TTL), since(now, h.Since), owner(h.Owner, h.Session, h.SessionLabel), quote(h.Metadata))
			name = ""
		}
		for i, q := range r.Waiters {
			state := "waiting #" + strconv.Itoa(i+1)
			if q.Conversion {
				state = "converting #" + strconv.Itoa(i+1)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t-\t-\t%s\t%s\t%s\n", quote(name), state, modeOf(r, q.Mode, q.Permits),
				since(now, q.Since), owner(q.Owner, q.Session, q.SessionLabel), quote(q.Metadata))
			name = ""
		}
	}
	tw.Flush()
}

// modeOf shows a mode, or permits of a semaphore.
func modeOf(r driver.ResourceInfo, m driver.Mode, permits int) string {
	if r.Capacity > 0 {
		return fmt.Sprintf("%d/%d", max(permits, 1), r.Capacity)
	}
	return m.String()
}

// owner shows a session by its label and id, else an owner id, shortened.
// They come from the store, as names do, and are quoted as they are.
func owner(id, session, label string) string {
	if session != "" && label != "" {
		return quote(label) + ", session " + quote(session)
	}
	if session != "" {
		return "session " + quote(session)
	}
	if len(id) > 12 {
		return quote(id[:12]) + "…"
	}
	return dashS(quote(id))
}

func dash(n uint64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatUint(n, 10)
}

func dashS(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func dur(d time.Duration) string {
	switch {
	case d <= 0:
		return "-"
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}

func since(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return dur(now.Sub(t))
}

// quote shows a name or metadata safely in a table: printable text as it
// is, anything else quoted.
func quote(s string) string {
	if s == "" {
		return ""
	}
	q := strconv.Quote(s)
	if q[1:len(q)-1] == s {
		return s
	}
	return q
}

// resourceJSON is one resource in dlm ls --json.
type resourceJSON struct {
	Resource string       `json:"resource"`
	Capacity int          `json:"capacity,omitempty"`
	Holders  []holderJSON `json:"holders"`
	Waiters  []waiterJSON `json:"waiters"`
}

type holderJSON struct {
	Owner   string `json:"owner,omitempty"`
	Session string `json:"session,omitempty"`
	// SessionLabel is the label of the holder's session (dlm server).
	SessionLabel string     `json:"session_label,omitempty"`
	Mode         string     `json:"mode"`
	Permits      int        `json:"permits,omitempty"`
	Token        uint64     `json:"token,omitempty"`
	TTLMs        int64      `json:"ttl_ms,omitempty"`
	Since        *time.Time `json:"since,omitempty"`
	Metadata     string     `json:"metadata,omitempty"`
}

type waiterJSON struct {
	Owner   string `json:"owner,omitempty"`
	Session string `json:"session,omitempty"`
	// SessionLabel is the label of the waiter's session (dlm server).
	SessionLabel string     `json:"session_label,omitempty"`
	Mode         string     `json:"mode"`
	Permits      int        `json:"permits,omitempty"`
	Conversion   bool       `json:"conversion,omitempty"`
	Since        *time.Time `json:"since,omitempty"`
	Metadata     string     `json:"metadata,omitempty"`
}

func listJSON(res []driver.ResourceInfo) []resourceJSON {
	out := make([]resourceJSON, 0, len(res))
	for _, r := range res {
		j := resourceJSON{Resource: r.Resource, Capacity: r.Capacity, Holders: []holderJSON{}, Waiters: []waiterJSON{}}
		for _, h := range r.Holders {
			j.Holders = append(j.Holders, holderJSON{Owner: h.Owner, Session: h.Session, SessionLabel: h.SessionLabel, Mode: h.Mode.String(), Permits: h.Permits,
				Token: h.Token, TTLMs: h.TTL.Milliseconds(), Since: timePtr(h.Since), Metadata: h.Metadata})
		}
		for _, q := range r.Waiters {
			j.Waiters = append(j.Waiters, waiterJSON{Owner: q.Owner, Session: q.Session, SessionLabel: q.SessionLabel, Mode: q.Mode.String(), Permits: q.Permits,
				Conversion: q.Conversion, Since: timePtr(q.Since), Metadata: q.Metadata})
		}
		out = append(out, j)
	}
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
