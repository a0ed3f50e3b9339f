package server

import (
	"strconv"
	"time"

	"github.com/dlmhq/dlm/server/protocol"

	"github.com/dlmhq/dlm/server/raftnode"

	"github.com/dlmhq/dlm/server/fsm"

	"github.com/hashicorp/raft"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dlmhq/dlm/internal/buildinfo"
	"github.com/dlmhq/dlm/locktable"
)

// serverMetrics are the server's Prometheus metrics, in a registry of its
// own (served at /metrics).
type serverMetrics struct {
	reg           *prometheus.Registry
	events        *prometheus.CounterVec
	refused       *prometheus.CounterVec
	expired       prometheus.Counter
	leaderChanges prometheus.Counter
	streams       prometheus.Gauge
	eventStreams  prometheus.Gauge
	applyLatency  prometheus.Histogram
	authRefused   *prometheus.CounterVec
	resumeRefused prometheus.Counter
	withdrawn     prometheus.Counter
}

func newServerMetrics(s *Server) *serverMetrics {
	m := &serverMetrics{
		reg: prometheus.NewRegistry(),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlm_server_lock_events_total",
			Help: "Lock events applied, by kind (Granted, Released, TimedOut...).",
		}, []string{"kind"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlm_server_refused_total",
			Help: "Requests refused by the lock table, by reason.",
		}, []string{"reason"}),
		expired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlm_server_sessions_expired_total",
			Help: "Sessions expired by this node as leader for missing keepalives.",
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlm_server_leader_terms_total",
			Help: "Times this node started serving as leader.",
		}),
		streams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dlm_server_streams",
			Help: "Session streams attached to this node.",
		}),
		eventStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dlm_server_event_streams",
			Help: "Live feed streams (GET /v1/events) open on this node.",
		}),
		applyLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "dlm_server_apply_duration_seconds",
			Help:    "Time from a proposal's submission to this node until its entry was committed and applied (leader only).",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2, 17), // 100µs to 6.6s
		}),
		authRefused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlm_server_auth_refused_total",
			Help: "Calls and requests refused by authentication (reason=\"unauthenticated\") or authorization (reason=\"permission_denied\").",
		}, []string{"reason"}),
	}
	m.withdrawn = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dlm_server_unary_withdrawn_total",
		Help: "Requests of the unary API withdrawn because their client hung up while they waited (released, or cancelled for a conversion).",
	})
	m.resumeRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dlm_server_resume_refused_total",
		Help: "Session resumes refused for a wrong or missing resume token (attempted takeovers, or clients that lost the token).",
	})
	for _, reason := range []string{"unauthenticated", "permission_denied"} {
		m.authRefused.WithLabelValues(reason) // shown from the start, at 0
	}
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "dlm_server_stream_queued_bytes",
		Help: "Bytes of messages queued for session streams, not yet sent (estimated: encoded size plus a fixed overhead per message); bounded by MaxQueuedBytes.",
	}, func() float64 { return float64(s.queue.used()) })
	slowEnded := prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "dlm_server_slow_streams_ended_total",
		Help: "Session streams ended (ResourceExhausted) because their queue, or the server's, was full: clients too slow to read.",
	}, func() float64 { return float64(s.queue.slowed.Load()) })
	m.reg.MustRegister(queued, slowEnded, buildGauge(buildinfo.Read()))
	m.reg.MustRegister(m.events, m.refused, m.expired, m.leaderChanges, m.streams, m.eventStreams, m.applyLatency, m.authRefused, m.resumeRefused, m.withdrawn,
		tableCollector{s}, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// buildGauge returns dlm_build_info: 1, with the build in its labels.
func buildGauge(info buildinfo.Info) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "dlm_build_info",
		Help: "Always 1: how this node's binary was built (dlm's version, the VCS revision, the Go version, whether the tree was modified).",
		ConstLabels: prometheus.Labels{
			"version":    info.Version,
			"revision":   info.Revision,
			"go_version": info.GoVersion,
			"modified":   strconv.FormatBool(info.Modified),
		},
	})
	g.Set(1)
	return g
}

// instrument makes node n report to the metrics what only it measures: the
// apply latency of its proposals.
func (m *serverMetrics) instrument(n *raftnode.Node) {
	n.ObserveApplyLatency(func(d time.Duration) { m.applyLatency.Observe(d.Seconds()) })
}

// count counts the events and refusals of an applied command.
func (m *serverMetrics) count(r *fsm.Result) {
	if r.Err != nil && !r.Duplicate {
		m.refused.WithLabelValues(protocol.ReasonOf(r.Err).String()).Inc()
	}
	for i := range r.Events {
		m.events.WithLabelValues(r.Events[i].Kind.String()).Inc()
	}
}

// tableCollector reads the lock table's gauges at scrape time.
type tableCollector struct{ s *Server }

var tableDescs = struct {
	sessions, resources, locks, pending, lastToken, applied, leader, ready, raftState, raftTerm, storageFailing, storageFailures *prometheus.Desc
}{
	sessions:  prometheus.NewDesc("dlm_server_sessions", "Open sessions.", nil, nil),
	resources: prometheus.NewDesc("dlm_server_resources", "Resources with a lock or a waiter.", nil, nil),
	locks:     prometheus.NewDesc("dlm_server_locks", "Lock records: granted locks plus queued requests.", nil, nil),
	pending:   prometheus.NewDesc("dlm_server_waiters", "Queued requests and conversions.", nil, nil),
	lastToken: prometheus.NewDesc("dlm_server_last_token", "The last fencing token issued.", nil, nil),
	applied:   prometheus.NewDesc("dlm_server_applied_index", "The Raft index last applied.", nil, nil),
	leader:    prometheus.NewDesc("dlm_server_leader", "1 if this node is the Raft leader.", nil, nil),
	ready:     prometheus.NewDesc("dlm_server_ready", "1 if this node serves requests (leader, log applied).", nil, nil),
	raftState: prometheus.NewDesc("dlm_server_raft_state", "1 for this node's Raft state (leader, follower, candidate, shutdown), 0 for the others.", []string{"state"}, nil),
	storageFailing: prometheus.NewDesc("dlm_server_storage_failing",
		"1 while a store of this node (the Raft log, its stable store, the snapshots) cannot be written: its disk is full or failing; the node refuses with REASON_STORAGE.", nil, nil),
	storageFailures: prometheus.NewDesc("dlm_server_storage_failures_total",
		"Writes of this node's Raft log, stable store and snapshots that failed (a full or failing disk).", nil, nil),
	raftTerm: prometheus.NewDesc("dlm_server_raft_term", "The node's current Raft term: it grows by one or more with every election the node takes part in or hears of.", nil, nil),
}

// raftStates are the values of dlm_server_raft_state's label.
var raftStates = [...]struct {
	state raft.RaftState
	label string
}{{raft.Leader, "leader"}, {raft.Follower, "follower"}, {raft.Candidate, "candidate"}, {raft.Shutdown, "shutdown"}}

func (tableCollector) Describe(ch chan<- *prometheus.Desc) {
	d := tableDescs
	for _, x := range []*prometheus.Desc{d.sessions, d.resources, d.locks, d.pending, d.lastToken, d.applied, d.leader, d.ready, d.raftState, d.raftTerm, d.storageFailing, d.storageFailures} {
		ch <- x
	}
}

func (c tableCollector) Collect(ch chan<- prometheus.Metric) {
	if c.s.node == nil {
		return
	}
	var st locktable.Stats
	c.s.node.FSM().Read(func(v fsm.View) { st = v.Table().Stats() })
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(tableDescs.sessions, float64(st.Sessions))
	gauge(tableDescs.resources, float64(st.Resources))
	gauge(tableDescs.locks, float64(st.Locks))
	gauge(tableDescs.pending, float64(st.Pending))
	gauge(tableDescs.lastToken, float64(st.LastToken))
	gauge(tableDescs.applied, float64(c.s.node.FSM().AppliedIndex()))
	gauge(tableDescs.leader, boolFloat(c.s.node.IsLeader()))
	gauge(tableDescs.ready, boolFloat(c.s.Ready()))
	state := c.s.node.State()
	for _, rs := range raftStates {
		ch <- prometheus.MustNewConstMetric(tableDescs.raftState, prometheus.GaugeValue, boolFloat(state == rs.state), rs.label)
	}
	gauge(tableDescs.raftTerm, float64(c.s.node.Term()))
	_, failing := c.s.node.StorageFailure()
	gauge(tableDescs.storageFailing, boolFloat(failing))
	ch <- prometheus.MustNewConstMetric(tableDescs.storageFailures, prometheus.CounterValue, float64(c.s.node.StorageFailures()))
}

func boolFloat(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
