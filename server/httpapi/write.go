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

// writeProto writes m as JSON (protobuf field names, enums by name).
func writeProto(w http.ResponseWriter, m proto.Message) {
	b, err := protojson.MarshalOptions{UseProtoNames: true, Multiline: true, EmitUnpopulated: true}.Marshal(m)
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
