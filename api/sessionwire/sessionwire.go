// Package sessionwire is the framing of the dlm server's session transport:
// the Session stream of api/dlm.proto served straight over TCP (or TLS),
// without gRPC. The client opens a connection with a four-byte preamble
// (PreamblePlain, or PreambleTLS followed by a TLS handshake); then each
// side sends frames, a kind byte and a 4-byte big-endian payload length
// followed by the payload, a protobuf message:
//
//	client: Hello, then Message (SessionRequest)...
//	server: Message (SessionResponse)..., then End
//
// It imports nothing of the project. Its Go API is not covered by dlm's
// compatibility promises; the bytes on the wire are (docs/compatibility.md).
package sessionwire

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"

	"google.golang.org/protobuf/proto"
)

// The preambles a session connection opens with; neither can begin a
// gRPC connection (HTTP/2's "PRI *" preface, or a TLS record).
const (
	PreamblePlain = "DLMP"
	PreambleTLS   = "DLMT"
	// PreambleLen is the length of a preamble.
	PreambleLen = 4
)

// Kind is the kind of a frame.
type Kind byte

// The kinds of frames.
const (
	KindHello   Kind = 'h' // SessionHello, the client's first frame
	KindMessage Kind = 'm' // SessionRequest (client) or SessionResponse (server)
	KindEnd     Kind = 'e' // SessionEnd, the server's last frame
)

// HeaderLen is the length of a frame's header: its kind and length.
const HeaderLen = 5

// ErrTooLarge is a frame longer than the reader's limit.
var ErrTooLarge = errors.New("dlm session transport: frame too large")

// ErrBadPreamble is a connection that does not open with a preamble.
var ErrBadPreamble = errors.New("dlm session transport: bad preamble")

// marshal encodes messages: not deterministic, the cheapest form.
var marshal = proto.MarshalOptions{}

// Append appends a frame of kind k holding m to b.
func Append(b []byte, k Kind, m proto.Message) ([]byte, error) {
	start := len(b)
	b = append(b, byte(k), 0, 0, 0, 0)
	b, err := marshal.MarshalAppend(b, m)
	if err != nil {
		return b[:start], fmt.Errorf("dlm session transport: encode: %w", err)
	}
	n := len(b) - start - HeaderLen
	if uint64(n) > 1<<32-1 {
		return b[:start], ErrTooLarge
	}
	binary.BigEndian.PutUint32(b[start+1:], uint32(n))
	return b, nil
}

// Reader reads the frames of a connection.
type Reader struct {
	r   *bufio.Reader
	max int
	buf []byte
}

// NewReader returns a Reader of r that refuses frames whose payload is
// longer than max bytes.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{r: bufio.NewReaderSize(r, 4<<10), max: max}
}

// Next reads the next frame. Its payload is valid until the next call. At
// the end of the input between two frames it returns io.EOF; within a
// frame, io.ErrUnexpectedEOF.
func (r *Reader) Next() (Kind, []byte, error) {
	var h [HeaderLen]byte
	if _, err := io.ReadFull(r.r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if uint64(n) > uint64(r.max) {
		return 0, nil, fmt.Errorf("%w: %d bytes, more than %d", ErrTooLarge, n, r.max)
	}
	if cap(r.buf) < int(n) {
		r.buf = make([]byte, n)
	}
	// A large buffer is not kept beyond the frame that needed it.
	p := r.buf[:n]
	if cap(r.buf) > 64<<10 {
		r.buf = nil
	}
	if _, err := io.ReadFull(r.r, p); err != nil {
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return 0, nil, err
	}
	return Kind(h[0]), p, nil
}

// Writer queues frames and writes what is queued at once on Flush. It is
// safe for concurrent use. After a failed write every call returns that
// write's error: the stream may have been cut within a frame.
type Writer struct {
	mu  sync.Mutex
	w   io.Writer
	buf []byte
	err error
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Queue queues a frame of kind k holding m.
func (w *Writer) Queue(k Kind, m proto.Message) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		return w.err
	}
	b, err := Append(w.buf, k, m)
	w.buf = b
	return err
}

// Flush writes the queued frames.
func (w *Writer) Flush() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil || len(w.buf) == 0 {
		return w.err
	}
	_, w.err = w.w.Write(w.buf)
	if cap(w.buf) > 64<<10 {
		w.buf = nil // a large buffer is not kept after the message that needed it
	} else {
		w.buf = w.buf[:0]
	}
	return w.err
}

// Err returns the error of the write that failed, if one has.
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}
