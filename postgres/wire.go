package postgres

import (
	"encoding/binary"
	"fmt"
	"strconv"
	"time"
)

// The shared sessions (session.go) speak to the server below pgx's type
// system: parameters go as text, which the server parses by the types it
// inferred when it prepared the statement, and results come back in the
// binary format. The store's statements use a handful of types only; these
// are they.

// encodeParams appends args in the text format to out, their bytes to buf.
func encodeParams(out [][]byte, buf []byte, args []any) ([][]byte, error) {
	for _, a := range args {
		start := len(buf)
		switch v := a.(type) {
		case int64:
			buf = strconv.AppendInt(buf, v, 10)
		case int32:
			buf = strconv.AppendInt(buf, int64(v), 10)
		case uint32:
			buf = strconv.AppendUint(buf, uint64(v), 10)
		case bool:
			buf = strconv.AppendBool(buf, v)
		case string:
			buf = append(buf, v...)
		case time.Time:
			buf = v.UTC().AppendFormat(buf, "2006-01-02 15:04:05.999999Z07:00")
		default:
			return nil, fmt.Errorf("postgres: no text encoding for a parameter of type %T", a)
		}
		out = append(out, buf[start:len(buf):len(buf)])
	}
	return out, nil
}

// postgresEpoch is where timestamptz counts its microseconds from.
var postgresEpoch = time.Date(2000, time.January, 1, 0, 0, 0, 0, time.UTC).Unix()

// scanRow decodes one row of binary values into dest, which holds *int32,
// **int64, *bool, **bool, *time.Time, or nil to skip a column. A pointer to
// a pointer is set to nil for NULL; NULL elsewhere is an error.
func scanRow(vals [][]byte, dest ...any) error {
	if len(vals) != len(dest) {
		return fmt.Errorf("postgres: %d columns for %d destinations", len(vals), len(dest))
	}
	for i, d := range dest {
		v := vals[i]
		if d == nil {
			continue
		}
		if v == nil {
			switch d := d.(type) {
			case **int64:
				*d = nil
				continue
			case **bool:
				*d = nil
				continue
			}
			return fmt.Errorf("postgres: column %d is NULL", i)
		}
		var want int
		switch d.(type) {
		case *int32:
			want = 4
		case **int64, *time.Time:
			want = 8
		case *bool, **bool:
			want = 1
		default:
			return fmt.Errorf("postgres: no binary decoding into %T", d)
		}
		if len(v) != want {
			return fmt.Errorf("postgres: column %d has %d bytes, not %d", i, len(v), want)
		}
		switch d := d.(type) {
		case *int32:
			*d = int32(binary.BigEndian.Uint32(v))
		case **int64:
			n := int64(binary.BigEndian.Uint64(v))
			*d = &n
		case *time.Time:
			*d = timestamptz(v)
		case *bool:
			*d = v[0] != 0
		case **bool:
			b := v[0] != 0
			*d = &b
		}
	}
	return nil
}

// grantRow decodes the row of a grant statement: the backend's pid, the
// token (NULL, ok false, unless granted), the grant's time, and the
// durability column, which it skips.
func grantRow(vals [][]byte) (pid int32, token int64, ok bool, since time.Time, err error) {
	if len(vals) != 4 {
		return 0, 0, false, since, fmt.Errorf("postgres: %d columns in a grant's row, not 4", len(vals))
	}
	if len(vals[0]) != 4 || len(vals[2]) != 8 || (vals[1] != nil && len(vals[1]) != 8) {
		return 0, 0, false, since, fmt.Errorf("postgres: a grant's row has columns of %d, %d and %d bytes", len(vals[0]), len(vals[1]), len(vals[2]))
	}
	pid = int32(binary.BigEndian.Uint32(vals[0]))
	if vals[1] != nil {
		token, ok = int64(binary.BigEndian.Uint64(vals[1])), true
	}
	return pid, token, ok, timestamptz(vals[2]), nil
}

// timestamptz decodes a timestamptz in the binary format (8 bytes).
func timestamptz(v []byte) time.Time {
	us := int64(binary.BigEndian.Uint64(v))
	return time.Unix(postgresEpoch+us/1e6, us%1e6*1e3)
}
