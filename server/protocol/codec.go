package protocol

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// badUTF8Field is the field number under which utf8Codec records, in a
// decoded message's unknown fields, which string field was not UTF-8: the
// largest field number, which no message of the protocol will use.
const badUTF8Field = protowire.MaxValidNumber

// maxRepairDepth bounds the nesting utf8Codec descends into.
const maxRepairDepth = 32

// utf8Codec is the server's gRPC codec: the proto codec, except that a
// request with a string field that is not valid UTF-8, which proto3 refuses
// to decode (gRPC Internal, ending the call: a whole session stream), is
// decoded with the bad bytes replaced by U+FFFD and marked, so that the
// handler refuses that one request with InvalidArgument naming the field
// (see badUTF8). A marker a client sent itself is dropped.
type utf8Codec struct {
	encoding.CodecV2
}

func NewCodec() utf8Codec {
	return utf8Codec{encoding.GetCodecV2(grpcproto.Name)}
}

// Unmarshal decodes data into v, a proto message.
func (c utf8Codec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(proto.Message)
	if !ok {
		return c.CodecV2.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return Decode(buf.ReadOnlyData(), m)
}

// Decode decodes b into m as the server's gRPC codec does (utf8Codec): a
// string field that is not valid UTF-8 is marked for the handler to refuse
// that one request, instead of failing the decoding. The session transport
// over TCP decodes its requests with it.
func Decode(b []byte, m proto.Message) error {
	err := proto.Unmarshal(b, m)
	if err == nil {
		dropMarker(m)
		return nil
	}
	fixed, bad, rerr := repairUTF8(b, m.ProtoReflect().Descriptor(), "", 0)
	if rerr != nil || bad == "" {
		return err
	}
	fixed = protowire.AppendTag(fixed, badUTF8Field, protowire.BytesType)
	fixed = protowire.AppendString(fixed, bad)
	if proto.Unmarshal(fixed, m) != nil {
		return err
	}
	return nil
}

// badUTF8 returns what utf8Codec recorded in m, such as "lock.resource is
// not valid UTF-8 (byte 3 is 0xff)": "" if every string of m was UTF-8.
func badUTF8(m proto.Message) string {
	for u := m.ProtoReflect().GetUnknown(); len(u) > 0; {
		num, typ, n := protowire.ConsumeTag(u)
		if n < 0 {
			return ""
		}
		u = u[n:]
		if num == badUTF8Field && typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(u)
			return string(v)
		}
		if n = protowire.ConsumeFieldValue(num, typ, u); n < 0 {
			return ""
		}
		u = u[n:]
	}
	return ""
}

// dropMarker removes from m's unknown fields any badUTF8Field: only the
// codec may set it.
func dropMarker(m proto.Message) {
	r := m.ProtoReflect()
	u := r.GetUnknown()
	if len(u) == 0 {
		return
	}
	var kept []byte
	for rest := u; len(rest) > 0; {
		num, typ, n := protowire.ConsumeTag(rest)
		if n < 0 {
			return
		}
		l := protowire.ConsumeFieldValue(num, typ, rest[n:])
		if l < 0 {
			return
		}
		if num != badUTF8Field {
			kept = append(kept, rest[:n+l]...)
		}
		rest = rest[n+l:]
	}
	if len(kept) != len(u) {
		r.SetUnknown(kept)
	}
}

// repairUTF8 re-encodes b, a message of type md, with every string field
// (in md and in the messages it holds, to maxRepairDepth) that is not
// valid UTF-8 made valid. It returns the first such field, described with
// its path from the top message (path is md's own), or "" if none.
func repairUTF8(b []byte, md protoreflect.MessageDescriptor, path string, depth int) ([]byte, string, error) {
	out := make([]byte, 0, len(b))
	first := ""
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, "", protowire.ParseError(n)
		}
		l := protowire.ConsumeFieldValue(num, typ, b[n:])
		if l < 0 {
			return nil, "", protowire.ParseError(l)
		}
		field := b[:n+l]
		b = b[n+l:]
		fd := md.Fields().ByNumber(num)
		if fd == nil || typ != protowire.BytesType {
			out = append(out, field...)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				if first == "" {
					i := firstInvalid(v)
					first = fmt.Sprintf("%s%s is not valid UTF-8 (byte %d is %#02x)", path, fd.Name(), i, v[i])
				}
				v = []byte(strings.ToValidUTF8(string(v), "\uFFFD"))
			}
		case protoreflect.MessageKind:
			if depth >= maxRepairDepth {
				break
			}
			sub, bad, err := repairUTF8(v, fd.Message(), path+string(fd.Name())+".", depth+1)
			if err != nil {
				return nil, "", err
			}
			if first == "" {
				first = bad
			}
			v = sub
		}
		out = protowire.AppendTag(out, num, typ)
		out = protowire.AppendBytes(out, v)
	}
	return out, first, nil
}

// firstInvalid returns the index of the first byte of b that does not
// start a valid UTF-8 sequence.
func firstInvalid(b []byte) int {
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n <= 1 {
			return i
		}
		i += n
	}
	return 0
}
