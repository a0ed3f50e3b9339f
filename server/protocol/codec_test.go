package protocol

import (
	"testing"

	"github.com/dlmhq/dlm/server/internal/servertest"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// FuzzUTF8Codec decodes arbitrary bytes as a session request and as a list
// request with the server's codec. What proto decodes, the codec decodes
// the same, unmarked (a marker the client sent is dropped); what proto
// refuses, the codec refuses too or decodes marked, with every string
// valid UTF-8.
func FuzzUTF8Codec(f *testing.F) {
	for _, m := range servertest.SessionRequests() {
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	lock, _ := proto.Marshal(servertest.LockMsg(1, "r-@", dlmpb.Mode_MODE_EX))
	f.Add(withRawBytes(lock, "@", "\xff"))
	list, _ := proto.Marshal(&dlmpb.ListRequest{Prefix: "p@", After: "a@"})
	f.Add(withRawBytes(list, "@", "\x80"))
	f.Add(protowire.AppendString(protowire.AppendTag(nil, badUTF8Field, protowire.BytesType), "forged"))
	codec := NewCodec()
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, pair := range [][2]proto.Message{
			{&dlmpb.SessionRequest{}, &dlmpb.SessionRequest{}},
			{&dlmpb.ListRequest{}, &dlmpb.ListRequest{}},
		} {
			want, got := pair[0], pair[1]
			perr := proto.Unmarshal(data, want)
			cerr := codec.Unmarshal(mem.BufferSlice{mem.SliceBuffer(data)}, got)
			switch {
			case perr == nil && cerr != nil:
				t.Fatalf("proto decodes %x, the codec does not: %v", data, cerr)
			case perr == nil:
				if bad := badUTF8(got); bad != "" {
					t.Fatalf("%x decodes marked %q", data, bad)
				}
				dropMarker(want)
				if !proto.Equal(want, got) {
					t.Fatalf("%x: the codec decodes %v, proto %v", data, got, want)
				}
			case cerr == nil:
				if badUTF8(got) == "" {
					t.Fatalf("%x: proto refuses it (%v), the codec decodes it unmarked", data, perr)
				}
				if _, err := proto.Marshal(got); err != nil {
					t.Fatalf("%x: the codec's message does not encode: %v", data, err)
				}
			}
		}
	})
}

// withRawBytes returns b with placeholder replaced by raw.
func withRawBytes(b []byte, placeholder, raw string) []byte {
	out := make([]byte, 0, len(b))
	for i := 0; i < len(b); i++ {
		if i+len(placeholder) <= len(b) && string(b[i:i+len(placeholder)]) == placeholder {
			out = append(out, raw...)
			i += len(placeholder) - 1
			continue
		}
		out = append(out, b[i])
	}
	return out
}
