package protocol

import (
	"encoding/hex"
	"strconv"
	"strings"

	"github.com/dlmhq/dlm/locktable"
)

// A session handle names a session in the unary API (dlm.v1.Locks): its
// id and its resume token, as "<id>.<token in hex>". Whoever holds it may
// use the session, so it is a secret: the server keeps only the token's
// hash (see fsm.NewResumeToken), and never logs or lists a handle.

// SessionHandle returns the handle of session sid with resume token tok.
func SessionHandle(sid locktable.SessionID, tok []byte) string {
	return strconv.FormatUint(uint64(sid), 10) + "." + hex.EncodeToString(tok)
}

// ParseSessionHandle returns the session id and the resume token of handle
// h; an error wraps ErrInvalidRequest and does not repeat the handle.
func ParseSessionHandle(h string) (locktable.SessionID, []byte, error) {
	if h == "" {
		return 0, nil, invalid("no session: pass the session handle OpenSession returned")
	}
	id, secret, ok := strings.Cut(h, ".")
	sid, err := strconv.ParseUint(id, 10, 64)
	if !ok || err != nil || sid == 0 {
		return 0, nil, invalid("malformed session handle: want <id>.<hex secret>, as OpenSession returned it")
	}
	tok, err := hex.DecodeString(secret)
	if err != nil || len(tok) == 0 || len(tok) > 64 {
		return 0, nil, invalid("malformed session handle: the part after the dot is not the hex secret OpenSession returned")
	}
	return locktable.SessionID(sid), tok, nil
}

// MaxRequestKeyBytes bounds a request id of the unary API.
const MaxRequestKeyBytes = 64

// ValidateRequestKey checks a request id of the unary API: empty (no
// retries), or 1 to MaxRequestKeyBytes printable ASCII characters.
func ValidateRequestKey(k string) error {
	if len(k) > MaxRequestKeyBytes {
		return invalid("request id of %d bytes: at most %d", len(k), MaxRequestKeyBytes)
	}
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < 0x21 || c > 0x7e {
			return invalid("request id has byte %#x at %d: want printable ASCII without spaces", c, i)
		}
	}
	return nil
}
