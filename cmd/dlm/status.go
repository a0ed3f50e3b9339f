package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/storeurl"
)

// statusCount is how many resources dlm status counts at most on stores
// that can only list.
const statusCount = 10000

const statusUsage = `Usage: dlm status [flags]

Describes a store: whether it answers and how fast, how many resources are
locked and how many requests wait; for a dlm server also its node, whether it
is the leader, the applied Raft index, the last fencing token and the open
sessions. It exits 0 when the store answers, 69 when it does not, 77
when a dlm server refuses the credentials or the identity's rights, and 2
for a bad flag or store URL (or a file it names that cannot be read).

Flags:
`

// statusReport is the output of dlm status.
type statusReport struct {
	Store     string `json:"store"`
	Kind      string `json:"kind"`
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	LatencyUs int64  `json:"latency_us,omitempty"`
	Resources int    `json:"resources"`
	// More is true when there were more resources than were counted.
	More    bool `json:"more,omitempty"`
	Holders int  `json:"holders"`
	Waiters int  `json:"waiters"`
	// Server is the dlm server's own status (dlm stores only).
	Server *serverStatus `json:"server,omitempty"`
	// code is the exit code of a failure other than an unreachable store:
	// refused credentials or rights, or a URL (or a file it names) that
	// cannot be used.
	code int
}

// fail records the error that ended the probe.
func (r *statusReport) fail(err error) {
	r.Error = userMessage(err)
	switch {
	case denied(err):
		r.code = exitDenied
	case errors.Is(err, driver.ErrInvalid): // a bad URL, or a file it names
		r.code = exitUsage
	}
}

// serverStatus is the part of dlm status that only a dlm server has.
type serverStatus struct {
	Node      string `json:"node"`
	Leader    bool   `json:"leader"`
	LeaderAt  string `json:"leader_address,omitempty"`
	Applied   uint64 `json:"applied_index"`
	LastToken uint64 `json:"last_token"`
	Sessions  int64  `json:"sessions"`
	Locks     int64  `json:"locks"`
	Version   string `json:"version,omitempty"` // the server's build (dlm version)
}

// statuser is a store that describes itself (the dlm server).
type statuser interface {
	Status(ctx context.Context) (*dlmpb.StatusResponse, error)
}

func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var url string
	var asJSON bool
	fs := flag.NewFlagSet("dlm status", flag.ContinueOnError)
	fs.StringVar(&url, "store", env("DLM_STORE", storeurl.DefaultURL), "store URL (env DLM_STORE)")
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	if code, ok := parseFlags(fs, args, statusUsage, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dlm status: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	spec, err := storeurl.Parse(url)
	if err != nil {
		fmt.Fprintf(stderr, "dlm status: --store: %s\n", userMessage(err))
		return exitUsage
	}
	rep := statusReport{Store: storeurl.Redact(url), Kind: string(spec.Kind)}
	rep.probe(ctx, url)
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.print(stdout)
	}
	if rep.code != 0 {
		return rep.code
	}
	if !rep.Reachable {
		return exitUnavailable
	}
	return 0
}

// probe fills the report from the store.
func (r *statusReport) probe(ctx context.Context, url string) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	store, err := storeurl.Open(ctx, url, storeOptions("dlm status")...)
	if err != nil {
		r.fail(err)
		return
	}
	defer closeStore(store)
	if s, ok := store.Driver().(statuser); ok {
		start := time.Now()
		st, err := s.Status(ctx)
		if err != nil {
			r.fail(store.Spec().Unreachable(err, time.Since(start)))
			return
		}
		r.LatencyUs = time.Since(start).Microseconds()
		r.Server = &serverStatus{Node: st.GetNodeId(), Leader: st.GetLeader(), LeaderAt: st.GetLeaderAddress(),
			Applied: st.GetAppliedIndex(), LastToken: st.GetLastToken(), Sessions: st.GetSessions(), Locks: st.GetLocks(),
			Version: st.GetBuild().GetVersion()}
	}
	lister, ok := store.Driver().(driver.Lister)
	if !ok {
		r.Reachable = r.Server != nil
		return
	}
	start := time.Now()
	res, err := lister.List(ctx, "", statusCount+1)
	if err != nil {
		r.fail(store.Spec().Unreachable(err, time.Since(start)))
		return
	}
	if r.LatencyUs == 0 {
		r.LatencyUs = time.Since(start).Microseconds()
	}
	r.Reachable = true
	if len(res) > statusCount {
		res, r.More = res[:statusCount], true
	}
	r.Resources = len(res)
	for _, ri := range res {
		r.Holders += len(ri.Holders)
		r.Waiters += len(ri.Waiters)
	}
}

// print writes the report as aligned lines.
func (r *statusReport) print(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 1, ' ', 0)
	defer tw.Flush()
	fmt.Fprintf(tw, "store:\t%s (%s)\n", r.Store, r.Kind)
	if !r.Reachable {
		fmt.Fprintf(tw, "reachable:\tno: %s\n", r.Error)
		return
	}
	fmt.Fprintf(tw, "reachable:\tyes, answered in %s\n", time.Duration(r.LatencyUs)*time.Microsecond)
	if s := r.Server; s != nil {
		role := "follower"
		if s.Leader {
			role = "leader"
		}
		fmt.Fprintf(tw, "node:\t%s (%s)\n", s.Node, role)
		if s.Version != "" {
			fmt.Fprintf(tw, "version:\t%s\n", s.Version)
		}
		if !s.Leader && s.LeaderAt != "" {
			fmt.Fprintf(tw, "leader:\t%s\n", s.LeaderAt)
		}
		fmt.Fprintf(tw, "applied index:\t%d\n", s.Applied)
		fmt.Fprintf(tw, "last token:\t%d\n", s.LastToken)
		fmt.Fprintf(tw, "sessions:\t%d (this one included)\n", s.Sessions)
	}
	more := ""
	if r.More {
		more = "+"
	}
	fmt.Fprintf(tw, "resources:\t%d%s\n", r.Resources, more)
	fmt.Fprintf(tw, "holders:\t%d\n", r.Holders)
	fmt.Fprintf(tw, "waiters:\t%d\n", r.Waiters)
}
