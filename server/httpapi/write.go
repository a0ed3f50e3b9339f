package httpapi

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// writeJSON writes v as indented JSON.
func writeJSON(w http.ResponseWriter, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// marshalJSON returns m in the JSON of the API, indented if multiline,
// else on one line: protobuf's JSON mapping with the field names of
// api/dlm.proto, enums by name, 64-bit integers as strings, Timestamps in
// RFC 3339 and Durations in seconds ("1.5s"). Every field that applies is
// written, zeros included; one that does not (an unset optional field or
// message) is left out. The rules are those of dlm.proto's file comment.
func marshalJSON(m proto.Message, multiline bool) ([]byte, error) {
	return protojson.MarshalOptions{UseProtoNames: true, EmitDefaultValues: true, Multiline: multiline}.Marshal(m)
}

// writeProto writes m as indented JSON (see marshalJSON).
func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := marshalJSON(m, true)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

// writeStatusError answers the gRPC status err with its HTTP equivalent.
func writeStatusError(w http.ResponseWriter, err error) {
	st := status.Convert(err)
	code := http.StatusInternalServerError
	switch st.Code() {
	case codes.InvalidArgument:
		code = http.StatusBadRequest
	case codes.Unauthenticated:
		code = http.StatusUnauthorized
	case codes.PermissionDenied:
		code = http.StatusForbidden
	case codes.Unavailable:
		code = http.StatusServiceUnavailable
	case codes.Canceled, codes.DeadlineExceeded:
		code = http.StatusGatewayTimeout
	}
	http.Error(w, st.Message(), code)
}

// pageParams reads the limit and locks parameters of a listing (0 when
// absent; the service caps them at its page bounds); it answers 400 and
// returns false if one is not a non-negative integer.
func pageParams(w http.ResponseWriter, q url.Values) (limit, locks int, ok bool) {
	for _, p := range []struct {
		name string
		v    *int
		max  int
	}{{"limit", &limit, math.MaxInt32}, {"locks", &locks, math.MaxInt32}} {
		text := q.Get(p.name)
		if text == "" {
			continue
		}
		n, err := strconv.Atoi(text)
		if err != nil || n < 0 {
			http.Error(w, fmt.Sprintf("%s %q: want a non-negative integer", p.name, text), http.StatusBadRequest)
			return 0, 0, false
		}
		*p.v = min(n, p.max)
	}
	return limit, locks, true
}
