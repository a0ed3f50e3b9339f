package history

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
)

// Kind is what an event records.
type Kind string

// Event kinds. A client records, for every acquisition (numbered by Lease
// within the client): Requested just before calling Acquire, then Granted
// (with the token and the lease's deadline) the moment Acquire returns it,
// or AcquireFailed; Valid each time the lease's deadline moves on (a renewal,
// a keepalive of the session); Lost the moment l.Lost() fires; ReleaseSent
// just before calling Release, Released when it returns. The fenced store records WriteAccepted or WriteRejected
// for every write it decides. The harness records Fault when it injects a
// fault and Heal when it undoes it, and Note for anything else worth seeing.
const (
	Requested     Kind = "requested"
	Granted       Kind = "granted"
	Valid         Kind = "valid"
	AcquireFailed Kind = "acquire-failed"
	Lost          Kind = "lost"
	ReleaseSent   Kind = "release-sent"
	Released      Kind = "released"
	WriteAccepted Kind = "write-accepted"
	WriteRejected Kind = "write-rejected"
	Fault         Kind = "fault"
	Heal          Kind = "heal"
	Exited        Kind = "exited" // the harness saw a client process end
	Note          Kind = "note"
)

// Event is one entry of a run's history. At is CLOCK_MONOTONIC (see Now),
// stamped by the process that saw the event.
type Event struct {
	At       int64  `json:"at"`
	Kind     Kind   `json:"kind"`
	Client   string `json:"client,omitempty"`
	Lease    uint64 `json:"lease,omitempty"` // the client's acquisition number
	Resource string `json:"resource,omitempty"`
	Token    uint64 `json:"token,omitempty"`
	// Deadline (Granted, Valid) is the lease's deadline as the client
	// computed it (Lease.Deadline: from its own send times), on the same
	// clock as At: past it, the client does not act under the lock.
	Deadline int64 `json:"deadline,omitempty"`
	// Strict (Requested) marks a try-lock of the strict workload: its
	// resource is judged by the strict model, refusals included.
	Strict bool `json:"strict,omitempty"`
	// Unsure (AcquireFailed) marks a failure without an answer: the call's
	// context ended, or the store could not be reached. The grant may have
	// happened at the store, and been withdrawn since: an indeterminate
	// operation.
	Unsure bool `json:"unsure,omitempty"`
	// Unsent (AcquireFailed) marks a single attempt (a try-lock) that
	// failed before its request left the client (the store had no
	// connection or no live session): nothing can have happened, and the
	// strict model leaves it out.
	Unsent bool `json:"unsent,omitempty"`
	// Stopped (Fault) says the fault SIGSTOPs its target client until the
	// heal (as FaultPauseClient does).
	Stopped bool   `json:"stopped,omitempty"`
	Round   int    `json:"round,omitempty"`  // Fault, Heal
	Fault   string `json:"fault,omitempty"`  // Fault, Heal: the fault kind
	Target  string `json:"target,omitempty"` // Fault, Heal: the node or client affected
	Note    string `json:"note,omitempty"`
}

func (e Event) String() string {
	b, _ := json.Marshal(e)
	return string(b)
}

// History collects the events of a run from several sources at once and
// lets the harness wait for an event.
type History struct {
	mu      sync.Mutex
	events  []Event
	changed chan struct{} // closed and replaced at every Add
	sink    io.Writer     // optional: every event as a JSON line, as it comes
	sinkErr error
}

// NewHistory returns an empty history. If sink is not nil, every event is
// also written to it as a JSON line as soon as it is added.
func NewHistory(sink io.Writer) *History {
	return &History{changed: make(chan struct{}), sink: sink}
}

// Add records events.
func (h *History) Add(evs ...Event) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.events = append(h.events, evs...)
	if h.sink != nil && h.sinkErr == nil {
		for _, e := range evs {
			b, _ := json.Marshal(e)
			if _, err := h.sink.Write(append(b, '\n')); err != nil {
				h.sinkErr = err
				break
			}
		}
	}
	close(h.changed)
	h.changed = make(chan struct{})
}

// Len returns the number of events recorded so far.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.events)
}

// Events returns a copy of the events, sorted by At (stable: events of one
// source with equal stamps keep their order).
func (h *History) Events() []Event {
	h.mu.Lock()
	evs := slices.Clone(h.events)
	h.mu.Unlock()
	SortEvents(evs)
	return evs
}

// SinkErr returns the first error writing to the sink.
func (h *History) SinkErr() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sinkErr
}

// Await waits until an event added at index from or later (in order of
// addition; see Len) satisfies match, and returns it, or ctx's error.
func (h *History) Await(ctx context.Context, from int, match func(Event) bool) (Event, error) {
	for {
		h.mu.Lock()
		for ; from < len(h.events); from++ {
			if match(h.events[from]) {
				e := h.events[from]
				h.mu.Unlock()
				return e, nil
			}
		}
		ch := h.changed
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return Event{}, ctx.Err()
		}
	}
}

// SortEvents sorts events by At, keeping the order of equal stamps.
func SortEvents(evs []Event) {
	slices.SortStableFunc(evs, func(a, b Event) int { return cmp.Compare(a.At, b.At) })
}

// WriteEvents writes events as JSON lines.
func WriteEvents(w io.Writer, evs []Event) error {
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	for _, e := range evs {
		if err := enc.Encode(e); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// ReadEvents reads JSON lines of events.
func ReadEvents(r io.Reader) ([]Event, error) {
	var evs []Event
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(sc.Bytes()) == 0 {
			continue
		}
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("chaos: history line %d: %w", line, err)
		}
		evs = append(evs, e)
	}
	return evs, sc.Err()
}
