package fsm

import (
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/locktable"
)

// FSM is the replicated state machine: the lock table plus the server's
// session records. It implements raft.FSM. Apply returns []Result (one per
// command of the entry) or an error wrapping ErrMalformedCommand.
//
// Raft calls Apply, Snapshot and Restore from one goroutine; Read and the
// other read methods may be called concurrently with them.
type FSM struct {
	limits locktable.Limits
	quotas Quotas

	mu          sync.RWMutex
	table       *locktable.Table
	sessions    map[locktable.SessionID]*sessionRecord
	metadata    map[locktable.LockID][]byte // holder descriptions of live locks
	usage       quotaBook                   // what each identity holds, for the quotas
	members     map[string]memberAddrs      // client addresses by Raft id
	lastSession locktable.SessionID
	applied     uint64

	observer atomic.Pointer[Observer]
}

// Observer is told of every command the FSM applies, with its result, in
// log order, from the goroutine that applies them and while the FSM is
// locked: it must be quick, must not block, and must not call the FSM. The
// result is the one the proposer gets; the observer must not change it.
type Observer func(c *dlmpb.Command, r *Result)

// SetObserver installs fn as the FSM's observer (nil removes it).
func (f *FSM) SetObserver(fn Observer) {
	if fn == nil {
		f.observer.Store(nil)
		return
	}
	f.observer.Store(&fn)
}

var _ raft.FSM = (*FSM)(nil)

// NewFSM returns an empty FSM whose table has the given limits, with the
// default quotas. Every replica must use the same limits.
func NewFSM(lim locktable.Limits) *FSM { return NewFSMWithQuotas(lim, Quotas{}) }

// NewFSMWithQuotas returns an empty FSM whose table has the given limits and
// whose identities have the given quotas (zero fields take the defaults).
// Every replica must use the same limits and quotas.
func NewFSMWithQuotas(lim locktable.Limits, q Quotas) *FSM {
	return &FSM{
		limits:   lim,
		quotas:   q.withDefaults(),
		table:    locktable.New(lim),
		sessions: make(map[locktable.SessionID]*sessionRecord),
		metadata: make(map[locktable.LockID][]byte),
		members:  make(map[string]memberAddrs),
		usage:    newQuotaBook(),
	}
}

// Apply applies one Raft log entry: a dlmpb.Batch whose commands run in
// order, stamped with the entry's index and the leader's clock. It returns
// []Result, or an error wrapping ErrMalformedCommand (and changes nothing)
// if the entry does not decode.
func (f *FSM) Apply(l *raft.Log) any {
	if l.Type != raft.LogCommand {
		return nil
	}
	var b dlmpb.Batch
	if err := proto.Unmarshal(l.Data, &b); err != nil {
		return fmt.Errorf("%w: entry %d: %v", ErrMalformedCommand, l.Index, err)
	}
	st := locktable.Stamp{Index: l.Index, Now: b.GetStampUnixNano()}

	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]Result, len(b.GetCommands()))
	obs := f.observer.Load()
	for i, c := range b.GetCommands() {
		out[i] = f.apply(st, c)
		f.touched(c, &out[i])
		f.trackMetadata(c, &out[i])
		f.count(c, &out[i])
		if obs != nil {
			(*obs)(c, &out[i])
		}
	}
	f.applied = l.Index
	return out
}

// touched sets r.Resource, the resource of the lock that command c (a lock
// request, conversion or relabel) changed.
func (f *FSM) touched(c *dlmpb.Command, r *Result) {
	if r.Err != nil || r.Duplicate {
		return
	}
	switch op := c.GetOp().(type) {
	case *dlmpb.Command_Lock:
		r.Resource = op.Lock.GetResource()
	case *dlmpb.Command_Convert, *dlmpb.Command_Relabel:
		if li, ok := f.table.Describe(r.Lock); ok {
			r.Resource = li.Resource
		}
	}
}

// trackMetadata keeps the holder description of a new lock and forgets
// those of locks that are gone.
func (f *FSM) trackMetadata(c *dlmpb.Command, r *Result) {
	if lk := c.GetLock(); lk != nil && len(lk.GetMetadata()) > 0 && r.Err == nil && !r.Duplicate {
		f.metadata[r.Lock] = lk.GetMetadata()
	}
	if len(f.metadata) == 0 {
		return
	}
	for i := range r.Events {
		switch e := &r.Events[i]; e.Kind {
		case locktable.EventReleased:
			delete(f.metadata, e.Lock)
		case locktable.EventCancelled, locktable.EventTimedOut:
			if !e.Conversion {
				delete(f.metadata, e.Lock)
			}
		}
	}
}

// AppliedIndex returns the index of the last entry applied (0 after Restore
// until the next Apply).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.applied
}

// Snapshot captures the state for raft: it encodes it at once (about a
// microsecond per lock), so Persist only writes bytes.
func (f *FSM) Snapshot() (raft.FSMSnapshot, error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	data, err := f.marshal()
	if err != nil {
		return nil, err
	}
	return snapshot(data), nil
}

// Encode returns the state encoded as a snapshot's Persist writes it (what
// Restore reads) and the index of the last entry applied, both as of the
// same entry: an online copy of the state.
func (f *FSM) Encode() (data []byte, applied uint64, err error) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	data, err = f.marshal()
	return data, f.applied, err
}

// Restore replaces the state with a snapshot written by Persist. Malformed
// data returns an error wrapping ErrMalformedSnapshot and changes nothing.
func (f *FSM) Restore(rc io.ReadCloser) error {
	defer rc.Close()
	data, err := io.ReadAll(rc)
	if err != nil {
		return fmt.Errorf("dlm server: read snapshot: %w", err)
	}
	if err := f.restore(data); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.usage = f.recount() // derived state: counted, not stored
	return nil
}

func cmpID[T ~uint64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
