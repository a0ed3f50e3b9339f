package history

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"
	"time"
)

// Properties the checker verifies over a history.
const (
	// PropExclusion (1): never two clients inside an EX critical section of
	// one resource at the same real time (from Granted to the earliest of
	// ReleaseSent and the holder's recorded deadline, past which it does not
	// act), unless the fenced store rejected a write of the stale one (the lower
	// token) or the stale one's process was stopped by the harness when the
	// other was granted (a frozen process does nothing; whatever it writes
	// after it resumes meets the fence).
	PropExclusion = 1
	// PropTokenOrder (2): tokens strictly increase per resource in grant
	// order. The order of two grants is certain when one was acknowledged
	// before the other was requested; then the later one's token must be
	// greater.
	PropTokenOrder = 2
	// PropSingleGrant (3): no acquisition (resource, token) is acknowledged
	// to two leases.
	PropSingleGrant = 3
	// PropBelief (4): no client still believes it holds a lock when another
	// client is granted it. A client's belief ends at the earliest of its
	// Lost, its release and the lease deadline it computed and recorded
	// itself (Granted, Valid): what the client decided, not when its
	// goroutines ran. A Lost that comes after the recorded deadline is
	// scheduling lateness, reported (Report.Late) and not a violation; a
	// grant before the recorded deadline, with the holder not yet told, is
	// the client's own arithmetic (or the server) being wrong.
	PropBelief = 4
	// PropRecovery (5): after every Heal, a grant comes within
	// RecoveryBound.
	PropRecovery = 5
	// PropTakeover (6): after a FaultFlapLeader, whose victim holding the
	// fault's resource is paused or killed while the leader is killed
	// again and again, another client is granted that resource within
	// TakeoverBound of the victim's death.
	PropTakeover = 6
)

var propNames = [...]string{"", "exclusion", "token order", "single grant", "belief", "recovery", "takeover"}

// FaultPauseClient is the fault kind (Event.Fault) of a client process
// stopped with SIGSTOP; Event.Target names the client. The checker excuses
// what a stopped process could not do (see PropExclusion).
const FaultPauseClient = "pause-client"

// FaultFlapLeader is the fault kind of the leader flap: the client holding
// Event.Resource (Event.Target) is paused or killed, then the leader is
// killed every half TTL. The checker measures the takeover (PropTakeover).
const FaultFlapLeader = "flap-leader"

// CheckConfig parameterises Check.
type CheckConfig struct {
	// RecoveryBound is the longest allowed time from a Heal to the next
	// grant (PropRecovery); 0 checks nothing but still records recoveries.
	RecoveryBound time.Duration
	// MaxDetails bounds the violations listed in full (all are counted);
	// default 100.
	MaxDetails int
	// LinearizeTimeout bounds the linearizability check (Linearizability);
	// default 2 minutes. Past it the verdict is porcupine.Unknown.
	LinearizeTimeout time.Duration
	// TakeoverBound is the longest allowed time from a flap's victim's
	// death to another client's grant of its resource (PropTakeover); 0
	// checks nothing but still records the takeovers.
	TakeoverBound time.Duration
}

// Violation is one breach of a property, with the events that show it.
type Violation struct {
	Property int     `json:"property"`
	Resource string  `json:"resource,omitempty"`
	What     string  `json:"what"`
	Events   []Event `json:"events"`
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "property %d (%s): %s", v.Property, propNames[v.Property], v.What)
	for _, e := range v.Events {
		fmt.Fprintf(&b, "\n    %s", e)
	}
	return b.String()
}

// Recovery is how quickly grants resumed around one fault.
type Recovery struct {
	Round  int    `json:"round"`
	Fault  string `json:"fault"`
	Target string `json:"target"`
	// Held is how long the fault lasted (Fault to Heal).
	Held time.Duration `json:"held"`
	// Failover is the time from the fault to the first grant after it.
	Failover time.Duration `json:"failover"`
	// Recovery is the time from the heal to the first grant after it; -1
	// when none came.
	Recovery time.Duration `json:"recovery"`
}

// Takeover is what a leader flap (FaultFlapLeader) measured: the time from
// the victim's death (its SIGSTOP or SIGKILL) to another client's grant of
// the resource it held.
type Takeover struct {
	Round    int    `json:"round"`
	Victim   string `json:"victim"`
	Resource string `json:"resource"`
	How      string `json:"how"` // the fault's note
	// After is from the victim's death to the grant; -1 when none came.
	After time.Duration `json:"after"`
}

// Report is the outcome of Check.
type Report struct {
	Events         int
	Acquisitions   int // grants
	AcquireFailed  int
	Lost           int
	WritesAccepted int
	WritesRejected int
	Rounds         int
	Faults         map[string]int
	Recoveries     []Recovery
	// Takeovers are the leader flaps' takeover times (PropTakeover).
	Takeovers []Takeover
	// ViolationCount counts violations by property (index 1..6).
	ViolationCount [7]int
	Violations     []Violation // the first MaxDetails
	// Overlaps excused under PropExclusion: by a rejected stale write, by a
	// stopped stale process.
	ExcusedFenced, ExcusedPaused int
	// LossLeads are, for each grant that followed another client's lease
	// that was lost rather than released, how long before the grant that
	// client's belief had ended (the safety margin of PropBelief; negative
	// would be a violation).
	LossLeads []time.Duration
	// Late are the Lost notifications that came after the lease's recorded
	// deadline: scheduling lateness, not a violation (the client had
	// stopped believing at its deadline).
	Late Lateness
	// LateWrites counts writes the fenced store accepted after the
	// writer's recorded deadline: the process paused between its check of
	// the deadline and the write (what the fence is for).
	LateWrites int
	// Linearizability is the second judge's verdict (see linearize.go).
	Linearizability Linearizability
}

// Lateness describes Lost notifications that came after the deadline the
// client had recorded.
type Lateness struct {
	// By is how late each was (Lost minus the recorded deadline).
	By []time.Duration
	// AfterNextGrant counts those that came after another client was
	// granted the resource.
	AfterNextGrant int
}

// TotalViolations returns the number of violations of every property.
func (r *Report) TotalViolations() int {
	n := 0
	for _, c := range r.ViolationCount {
		n += c
	}
	return n
}

// lease is one acquisition reconstructed from the history.
type lease struct {
	key                   string
	client                string
	resource              string
	token                 uint64
	req, grant, lost, rel *Event
	released              *Event // Released: the release returned
	failed                *Event // AcquireFailed
	rejected, accepted    []*Event
	// deadline is the latest deadline the client recorded for the lease
	// (math.MaxInt64 when it recorded none).
	deadline         int64
	csEnd, beliefEnd int64 // math.MaxInt64: never ended in the history
}

type window struct{ from, to int64 }

// Check verifies the properties over a history (in any order) and returns
// the report, with the second judge's verdict (Report.Linearizability). It
// is a pure function of its arguments, but for that check's time limit.
func Check(history []Event, cfg CheckConfig) *Report {
	if cfg.MaxDetails <= 0 {
		cfg.MaxDetails = 100
	}
	if cfg.LinearizeTimeout <= 0 {
		cfg.LinearizeTimeout = 2 * time.Minute
	}
	evs := slices.Clone(history)
	SortEvents(evs)
	r := &Report{Events: len(evs), Faults: map[string]int{}}
	violate := func(v Violation) {
		r.ViolationCount[v.Property]++
		if len(r.Violations) < cfg.MaxDetails {
			r.Violations = append(r.Violations, v)
		}
	}

	leases := map[string]*lease{}
	var granted []*lease // in order of grant stamps
	get := func(e *Event) *lease {
		k := fmt.Sprintf("%s#%d", e.Client, e.Lease)
		l := leases[k]
		if l == nil {
			l = &lease{key: k, client: e.Client, resource: e.Resource, deadline: math.MaxInt64,
				csEnd: math.MaxInt64, beliefEnd: math.MaxInt64}
			leases[k] = l
		}
		return l
	}
	exited := map[string][]int64{} // a client's exits (a killed one is started again)
	strict := map[string]bool{}    // resources of the strict workload
	pauses := map[string][]window{}
	openPause := map[string]int{} // client -> index of its open pause window
	faults := map[int]*Event{}
	var heals []*Event
	var grantAts []int64 // every grant stamp, sorted (evs is sorted)

	// Property 2 and 3 in one pass, in time order.
	type tok struct {
		token uint64
		l     *lease
	}
	maxTok := map[string]tok{}     // resource -> greatest token acknowledged so far
	atRequest := map[string]tok{}  // lease key -> maxTok of its resource when requested
	byToken := map[string]*lease{} // resource#token -> lease granted it

	for i := range evs {
		e := &evs[i]
		switch e.Kind {
		case Requested:
			l := get(e)
			l.req = e
			atRequest[l.key] = maxTok[e.Resource]
			if e.Strict {
				strict[e.Resource] = true
			}
		case Granted:
			r.Acquisitions++
			grantAts = append(grantAts, e.At)
			l := get(e)
			if l.grant != nil {
				violate(Violation{Property: PropSingleGrant, Resource: e.Resource,
					What:   fmt.Sprintf("lease %s acknowledged twice", l.key),
					Events: []Event{*l.grant, *e}})
				continue
			}
			l.grant, l.token, l.resource = e, e.Token, e.Resource
			l.record(e.Deadline)
			granted = append(granted, l)
			tk := fmt.Sprintf("%s#%d", e.Resource, e.Token)
			if other := byToken[tk]; other != nil {
				violate(Violation{Property: PropSingleGrant, Resource: e.Resource,
					What:   fmt.Sprintf("token %d of %q acknowledged to %s and to %s", e.Token, e.Resource, other.key, l.key),
					Events: []Event{*other.grant, *e}})
			} else {
				byToken[tk] = l
			}
			if prev, ok := atRequest[l.key]; ok && prev.l != nil && e.Token <= prev.token {
				violate(Violation{Property: PropTokenOrder, Resource: e.Resource,
					What: fmt.Sprintf("%s was granted token %d after %s had been acknowledged token %d before %s was requested",
						l.key, e.Token, prev.l.key, prev.token, l.key),
					Events: []Event{*prev.l.grant, *l.req, *e}})
			}
			if m := maxTok[e.Resource]; m.l == nil || e.Token > m.token {
				maxTok[e.Resource] = tok{e.Token, l}
			}
		case Valid:
			get(e).record(e.Deadline)
		case AcquireFailed:
			r.AcquireFailed++
			if l := get(e); l.failed == nil {
				l.failed = e
			}
		case Lost:
			r.Lost++
			l := get(e)
			if l.lost == nil {
				l.lost = e
			}
		case ReleaseSent:
			l := get(e)
			if l.rel == nil {
				l.rel = e
			}
		case Released:
			l := get(e)
			if l.released == nil {
				l.released = e
			}
		case WriteAccepted:
			r.WritesAccepted++
			l := get(e)
			l.accepted = append(l.accepted, e)
		case WriteRejected:
			r.WritesRejected++
			l := get(e)
			l.rejected = append(l.rejected, e)
		case Exited:
			exited[e.Client] = append(exited[e.Client], e.At)
		case Fault:
			r.Faults[e.Fault]++
			faults[e.Round] = e
			if e.Fault == FaultPauseClient || e.Stopped {
				pauses[e.Target] = append(pauses[e.Target], window{e.At, math.MaxInt64})
				openPause[e.Target] = len(pauses[e.Target]) - 1
			}
		case Heal:
			heals = append(heals, e)
			if i, ok := openPause[e.Target]; ok {
				pauses[e.Target][i].to = e.At
				delete(openPause, e.Target)
			}
		}
	}
	r.Rounds = len(faults)

	// Where each critical section and each belief ended.
	for _, l := range granted {
		if l.rel != nil {
			l.csEnd = l.rel.At
		}
		for _, x := range exited[l.client] { // the first exit after the grant
			if x >= l.grant.At {
				l.csEnd = min(l.csEnd, x)
				break
			}
		}
		l.csEnd = min(l.csEnd, l.deadline)
		l.beliefEnd = l.csEnd
		if l.lost != nil && l.lost.At < l.beliefEnd {
			l.beliefEnd = l.lost.At
		}
		for _, w := range l.accepted {
			if w.At > l.deadline {
				r.LateWrites++
			}
		}
	}
	stoppedAt := func(client string, at int64) (window, bool) {
		for _, w := range pauses[client] {
			if w.from <= at && at <= w.to {
				return w, true
			}
		}
		return window{}, false
	}

	// Properties 1 and 4: sweep each resource's leases in grant order,
	// keeping those whose critical section (or belief) is still open.
	byRes := map[string][]*lease{}
	for _, l := range granted {
		byRes[l.resource] = append(byRes[l.resource], l)
	}
	resources := make([]string, 0, len(byRes))
	for res := range byRes {
		resources = append(resources, res)
	}
	slices.Sort(resources)
	for _, res := range resources {
		var cs, belief []*lease
		var prev *lease
		leases := byRes[res]
		for i, l := range leases {
			if l.lost != nil && l.deadline != math.MaxInt64 && l.lost.At > l.deadline {
				r.Late.By = append(r.Late.By, time.Duration(l.lost.At-l.deadline))
				for _, n := range leases[i+1:] {
					if n.client != l.client {
						if n.grant.At < l.lost.At {
							r.Late.AfterNextGrant++
						}
						break
					}
				}
			}
		}
		for _, l := range leases {
			at := l.grant.At
			cs = slices.DeleteFunc(cs, func(a *lease) bool { return a.csEnd <= at })
			belief = slices.DeleteFunc(belief, func(a *lease) bool { return a.beliefEnd <= at })
			for _, a := range cs {
				stale := a
				if l.token < a.token {
					stale = l
				}
				newer := l
				if stale == l {
					newer = a
				}
				if len(stale.rejected) > 0 {
					r.ExcusedFenced++
					continue
				}
				if _, ok := stoppedAt(stale.client, newer.grant.At); ok {
					r.ExcusedPaused++
					continue
				}
				ev := []Event{*a.grant, *l.grant}
				if a.rel != nil {
					ev = append(ev, *a.rel)
				}
				violate(Violation{Property: PropExclusion, Resource: res,
					What: fmt.Sprintf("%s (token %d) entered while %s (token %d) was inside (until %s), and no write of the stale one was rejected",
						l.key, l.token, a.key, a.token, endString(a.csEnd, at)),
					Events: ev})
			}
			for _, a := range belief {
				if a.client == l.client {
					continue
				}
				ev := []Event{*a.grant, *l.grant}
				if a.lost != nil {
					ev = append(ev, *a.lost)
				}
				if a.rel != nil {
					ev = append(ev, *a.rel)
				}
				violate(Violation{Property: PropBelief, Resource: res,
					What: fmt.Sprintf("%s was granted token %d while %s (token %d) still believed it held the lock (until %s)",
						l.key, l.token, a.key, a.token, endString(a.beliefEnd, at)),
					Events: ev})
			}
			if prev != nil && prev.client != l.client && (prev.rel == nil || prev.rel.At > at) && prev.beliefEnd <= at {
				r.LossLeads = append(r.LossLeads, time.Duration(at-prev.beliefEnd))
			}
			cs = append(cs, l)
			belief = append(belief, l)
			prev = l
		}
	}

	all := map[string][]*lease{} // every acquisition of the strict resources, granted or not
	for _, l := range leases {
		if strict[l.resource] && (l.req != nil || l.grant != nil) {
			all[l.resource] = append(all[l.resource], l)
		}
	}
	for _, ls := range all {
		slices.SortFunc(ls, func(a, b *lease) int { return cmp.Compare(a.start(), b.start()) })
	}
	r.Linearizability = linearize(byRes, all, resources, cfg)

	// Property 6.
	for _, round := range slices.Sorted(maps.Keys(faults)) {
		f := faults[round]
		if f.Fault != FaultFlapLeader {
			continue
		}
		tk := Takeover{Round: round, Victim: f.Target, Resource: f.Resource, How: f.Note, After: -1}
		for _, l := range byRes[f.Resource] {
			if l.client != f.Target && l.grant.At > f.At {
				tk.After = time.Duration(l.grant.At - f.At)
				break
			}
		}
		r.Takeovers = append(r.Takeovers, tk)
		switch {
		case tk.After < 0:
			violate(Violation{Property: PropTakeover, Resource: f.Resource,
				What: fmt.Sprintf("round %d (%s): nobody else was granted %q after %s's death", round, f.Fault, f.Resource, f.Target), Events: []Event{*f}})
		case cfg.TakeoverBound > 0 && tk.After > cfg.TakeoverBound:
			violate(Violation{Property: PropTakeover, Resource: f.Resource,
				What: fmt.Sprintf("round %d (%s): %q was granted to another client %s after %s's death, more than %s",
					round, f.Fault, f.Resource, tk.After.Round(time.Millisecond), f.Target, cfg.TakeoverBound), Events: []Event{*f}})
		}
	}

	// Property 5.
	firstGrantAfter := func(at int64) (int64, bool) {
		i, _ := slices.BinarySearch(grantAts, at+1)
		if i == len(grantAts) {
			return 0, false
		}
		return grantAts[i], true
	}
	for _, h := range heals {
		rec := Recovery{Round: h.Round, Fault: h.Fault, Target: h.Target, Recovery: -1, Failover: -1}
		if f := faults[h.Round]; f != nil {
			rec.Held = time.Duration(h.At - f.At)
			if g, ok := firstGrantAfter(f.At); ok {
				rec.Failover = time.Duration(g - f.At)
			}
		}
		g, ok := firstGrantAfter(h.At)
		if ok {
			rec.Recovery = time.Duration(g - h.At)
		}
		r.Recoveries = append(r.Recoveries, rec)
		switch {
		case !ok:
			violate(Violation{Property: PropRecovery, What: fmt.Sprintf("round %d (%s %s): no grant after the heal", h.Round, h.Fault, h.Target), Events: []Event{*h}})
		case cfg.RecoveryBound > 0 && rec.Recovery > cfg.RecoveryBound:
			violate(Violation{Property: PropRecovery, What: fmt.Sprintf("round %d (%s %s): first grant %s after the heal, more than %s",
				h.Round, h.Fault, h.Target, rec.Recovery.Round(time.Millisecond), cfg.RecoveryBound), Events: []Event{*h}})
		}
	}
	return r
}

// start is when the acquisition began: its request, or its grant.
func (l *lease) start() int64 {
	if l.req != nil {
		return l.req.At
	}
	if l.grant != nil {
		return l.grant.At
	}
	return 0
}

// record notes a deadline the client recorded (0: none).
func (l *lease) record(deadline int64) {
	if deadline == 0 {
		return
	}
	if l.deadline == math.MaxInt64 || deadline > l.deadline {
		l.deadline = deadline
	}
}

func endString(end, at int64) string {
	if end == math.MaxInt64 {
		return "the end of the history"
	}
	return fmt.Sprintf("%s after that grant", time.Duration(end-at).Round(time.Microsecond))
}

// Percentile returns the p-th percentile (0..100, nearest rank) of ds, or 0
// for none.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Summary renders the report for people.
func (r *Report) Summary() string {
	var b strings.Builder
	ms := func(d time.Duration) string { return d.Round(100 * time.Microsecond).String() }
	fmt.Fprintf(&b, "rounds: %d\n", r.Rounds)
	kinds := make([]string, 0, len(r.Faults))
	for k := range r.Faults {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	fmt.Fprintf(&b, "faults:")
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s=%d", k, r.Faults[k])
	}
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "acquisitions: %d (failed attempts %d, lost %d); fenced writes accepted %d, rejected %d\n",
		r.Acquisitions, r.AcquireFailed, r.Lost, r.WritesAccepted, r.WritesRejected)
	fmt.Fprintf(&b, "violations: %d", r.TotalViolations())
	for p := 1; p < len(r.ViolationCount); p++ {
		fmt.Fprintf(&b, " (%d) %s=%d", p, propNames[p], r.ViolationCount[p])
	}
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "linearizability (porcupine): %s\n", r.Linearizability)
	fmt.Fprintf(&b, "overlaps excused: fenced=%d paused=%d; writes accepted past the writer's deadline: %d\n", r.ExcusedFenced, r.ExcusedPaused, r.LateWrites)
	fmt.Fprintf(&b, "late loss notices (Lost after the recorded deadline): %d", len(r.Late.By))
	if len(r.Late.By) > 0 {
		fmt.Fprintf(&b, ", late by p50 %s p99 %s max %s; %d after the next grant",
			ms(Percentile(r.Late.By, 50)), ms(Percentile(r.Late.By, 99)), ms(Percentile(r.Late.By, 100)), r.Late.AfterNextGrant)
	}
	fmt.Fprintln(&b)
	var rec, fo []time.Duration
	for _, x := range r.Recoveries {
		if x.Recovery >= 0 {
			rec = append(rec, x.Recovery)
		}
		if x.Failover >= 0 {
			fo = append(fo, x.Failover)
		}
	}
	fmt.Fprintf(&b, "recovery (heal to next grant): p50 %s p99 %s max %s over %d heals\n",
		ms(Percentile(rec, 50)), ms(Percentile(rec, 99)), ms(Percentile(rec, 100)), len(rec))
	fmt.Fprintf(&b, "fail-over (fault to next grant): p50 %s p99 %s max %s\n",
		ms(Percentile(fo, 50)), ms(Percentile(fo, 99)), ms(Percentile(fo, 100)))
	byKind := map[string][]time.Duration{}
	for _, x := range r.Recoveries {
		if x.Failover >= 0 {
			byKind[x.Fault] = append(byKind[x.Fault], x.Failover)
		}
	}
	for _, k := range kinds {
		if d := byKind[k]; len(d) > 0 {
			fmt.Fprintf(&b, "  fail-over %-17s p50 %s p99 %s\n", k, ms(Percentile(d, 50)), ms(Percentile(d, 99)))
		}
	}
	if len(r.Takeovers) > 0 {
		var ds []time.Duration
		for _, t := range r.Takeovers {
			if t.After >= 0 {
				ds = append(ds, t.After)
			}
		}
		fmt.Fprintf(&b, "leader flaps, victim's death to another's grant: %d flaps, p50 %s max %s\n",
			len(r.Takeovers), ms(Percentile(ds, 50)), ms(Percentile(ds, 100)))
		for _, t := range r.Takeovers {
			fmt.Fprintf(&b, "  round %d: %s: %s\n", t.Round, t.How, ms(t.After))
		}
	}
	if len(r.LossLeads) > 0 {
		fmt.Fprintf(&b, "belief ended before the next holder's grant (lost leases): %d, min lead %s, p50 %s\n",
			len(r.LossLeads), ms(Percentile(r.LossLeads, 0)), ms(Percentile(r.LossLeads, 50)))
	}
	for _, v := range r.Violations {
		fmt.Fprintf(&b, "%s\n", v)
	}
	if n := r.TotalViolations(); n > len(r.Violations) {
		fmt.Fprintf(&b, "... and %d more violations\n", n-len(r.Violations))
	}
	return b.String()
}
