package sessionwire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
)

func TestFramesRoundTrip(t *testing.T) {
	hello := &dlmpb.SessionHello{Authorization: "Bearer x"}
	msg := &dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{Resource: strings.Repeat("r", 1000)}}}
	var b []byte
	var err error
	for _, f := range []struct {
		k Kind
		m proto.Message
	}{{KindHello, hello}, {KindMessage, msg}, {KindMessage, &dlmpb.SessionRequest{}}} {
		if b, err = Append(b, f.k, f.m); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(bytes.NewReader(b), 4096)
	for i, want := range []struct {
		k Kind
		m proto.Message
	}{{KindHello, hello}, {KindMessage, msg}, {KindMessage, &dlmpb.SessionRequest{}}} {
		k, p, err := r.Next()
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		got := want.m.ProtoReflect().New().Interface()
		if err := proto.Unmarshal(p, got); err != nil {
			t.Fatal(err)
		}
		if k != want.k || !proto.Equal(got, want.m) {
			t.Fatalf("frame %d: %c %v, want %c %v", i, k, got, want.k, want.m)
		}
	}
	if _, _, err := r.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the last frame: %v, want io.EOF", err)
	}
}

func TestReaderRefusesLargeAndCutFrames(t *testing.T) {
	big, err := Append(nil, KindMessage, &dlmpb.SessionHello{Authorization: strings.Repeat("a", 200)})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := NewReader(bytes.NewReader(big), 100).Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a frame over the limit: %v, want ErrTooLarge", err)
	}
	for _, cut := range []int{1, HeaderLen, len(big) - 1} {
		_, _, err := NewReader(bytes.NewReader(big[:cut]), 1<<20).Next()
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("a frame cut at %d bytes: %v, want io.ErrUnexpectedEOF", cut, err)
		}
	}
}

// The preambles differ from the first bytes of every gRPC connection:
// HTTP/2's preface and a TLS record.
func TestPreamblesAreNotGRPC(t *testing.T) {
	for _, p := range []string{PreamblePlain, PreambleTLS} {
		if len(p) != PreambleLen || strings.HasPrefix("PRI * HTTP/2.0", p) || p[0] == 0x16 {
			t.Fatalf("preamble %q", p)
		}
	}
}

// failingWriter accepts n writes, then fails.
type failingWriter struct {
	n    int
	data bytes.Buffer
}

func (f *failingWriter) Write(p []byte) (int, error) {
	if f.n == 0 {
		return 0, errors.New("broken pipe")
	}
	f.n--
	return f.data.Write(p)
}

// A Writer sends what it queued in one write per Flush, and after a failed
// write fails every call with that write's error.
func TestWriterQueuesAndKeepsItsError(t *testing.T) {
	out := &failingWriter{n: 1}
	w := NewWriter(out)
	for range 3 {
		if err := w.Queue(KindMessage, &dlmpb.SessionRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if out.data.Len() != 0 {
		t.Fatal("Queue wrote")
	}
	if err := w.Flush(); err != nil || out.data.Len() != 3*HeaderLen {
		t.Fatalf("Flush: %v, %d bytes written, want 3 empty frames in one write", err, out.data.Len())
	}
	if err := w.Flush(); err != nil {
		t.Fatalf("Flush of nothing: %v", err)
	}
	if err := w.Queue(KindEnd, &dlmpb.SessionEnd{}); err != nil {
		t.Fatal(err)
	}
	first := w.Flush()
	if first == nil || w.Err() != first {
		t.Fatalf("a failed write: %v, Err %v", first, w.Err())
	}
	if err := w.Queue(KindMessage, &dlmpb.SessionRequest{}); err != first {
		t.Fatalf("Queue after the failure: %v, want %v", err, first)
	}
}
