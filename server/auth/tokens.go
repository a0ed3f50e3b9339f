package auth

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Limits of the authentication configuration.
const (
	// MaxAuthFileBytes bounds a token or rules file.
	MaxAuthFileBytes = 1 << 20
	// MaxTokens bounds the tokens of a token file.
	MaxTokens = 10000
	// MinTokenBytes and MaxTokenBytes bound a token's length. Tokens are
	// bearer secrets: make them long and random (32 random bytes, encoded).
	MinTokenBytes = 16
	MaxTokenBytes = 1024
	// MaxIdentityBytes bounds an identity (a token's, or a client
	// certificate's common name).
	MaxIdentityBytes = 128
)

// ErrAuthConfig is returned, wrapped with the file, line and cause, for a
// token or rules file that cannot be used.
var ErrAuthConfig = errors.New("dlm server: bad authentication configuration")

// Tokens maps bearer tokens to identities. Only the tokens' SHA-256 hashes
// are kept, and a token is compared with every one in constant time.
//
// A token file has one "identity token" pair per line, separated by spaces
// or tabs; blank lines and lines whose first non-blank character is '#' are
// ignored. An identity is 1 to MaxIdentityBytes printable ASCII characters
// without spaces, and not "*"; it may have several tokens (to rotate them).
// A token is MinTokenBytes to MaxTokenBytes printable ASCII characters
// without spaces, and appears once in the file. At most MaxTokens tokens,
// MaxAuthFileBytes bytes.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	hash     [sha256.Size]byte
	identity string
}

// LoadTokens reads a token file (see Tokens).
func LoadTokens(path string) (*Tokens, error) {
	data, err := readLimited(path, MaxAuthFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: token file: %w", ErrAuthConfig, err)
	}
	t, err := ParseTokens(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// ParseTokens reads tokens in the token file format (see Tokens). Its
// errors name the line, never the token.
func ParseTokens(r io.Reader) (*Tokens, error) {
	t := &Tokens{}
	seen := map[[sha256.Size]byte]int{}
	sc := bufio.NewScanner(io.LimitReader(r, MaxAuthFileBytes+1))
	sc.Buffer(make([]byte, 0, 4096), MaxAuthFileBytes+1)
	read := 0
	for n := 1; sc.Scan(); n++ {
		read += len(sc.Bytes()) + 1
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("%w: token file line %d: want \"identity token\"", ErrAuthConfig, n)
		}
		if err := checkIdentity(fields[0]); err != nil {
			return nil, fmt.Errorf("%w: token file line %d: %w", ErrAuthConfig, n, err)
		}
		if err := checkToken(fields[1]); err != nil {
			return nil, fmt.Errorf("%w: token file line %d: %w", ErrAuthConfig, n, err)
		}
		h := sha256.Sum256([]byte(fields[1]))
		if first, dup := seen[h]; dup {
			return nil, fmt.Errorf("%w: token file line %d: the same token as line %d", ErrAuthConfig, n, first)
		}
		if len(t.entries) == MaxTokens {
			return nil, fmt.Errorf("%w: token file: more than %d tokens", ErrAuthConfig, MaxTokens)
		}
		seen[h] = n
		t.entries = append(t.entries, tokenEntry{hash: h, identity: fields[0]})
	}
	if err := sc.Err(); err != nil || read > MaxAuthFileBytes {
		return nil, fmt.Errorf("%w: token file: larger than %d bytes, or a line too long", ErrAuthConfig, MaxAuthFileBytes)
	}
	if len(t.entries) == 0 {
		return nil, fmt.Errorf("%w: token file: no token in it", ErrAuthConfig)
	}
	return t, nil
}

// Len returns the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Identity returns the identity whose token is token. It hashes token and
// compares the hash with every entry in constant time, whether or not one
// matched.
func (t *Tokens) Identity(token string) (string, bool) {
	if len(token) < MinTokenBytes || len(token) > MaxTokenBytes {
		return "", false
	}
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range t.entries {
		if subtle.ConstantTimeCompare(h[:], t.entries[i].hash[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return t.entries[found].identity, true
}

// checkIdentity accepts 1 to MaxIdentityBytes printable ASCII characters
// without spaces, other than "*" (which rules use for any identity).
func checkIdentity(id string) error {
	switch {
	case id == "" || len(id) > MaxIdentityBytes:
		return fmt.Errorf("identity: want 1 to %d characters", MaxIdentityBytes)
	case id == "*":
		return errors.New(`identity "*" is reserved for rules (any identity)`)
	case !printable(id):
		return errors.New("identity: want printable ASCII without spaces")
	}
	return nil
}

// checkCertIdentity accepts a client certificate's common name as an
// identity: as checkIdentity, but with spaces inside allowed (such
// an identity can only be matched by "*" rules, whose fields are separated
// by spaces).
func checkCertIdentity(id string) error {
	if strings.HasPrefix(id, " ") || strings.HasSuffix(id, " ") {
		return errors.New("identity: no leading or trailing spaces")
	}
	return checkIdentity(strings.ReplaceAll(id, " ", "_"))
}

// checkToken accepts MinTokenBytes to MaxTokenBytes printable ASCII
// characters without spaces. Its errors never quote the token.
func checkToken(tok string) error {
	switch {
	case len(tok) < MinTokenBytes || len(tok) > MaxTokenBytes:
		return fmt.Errorf("token: want %d to %d characters, got %d", MinTokenBytes, MaxTokenBytes, len(tok))
	case !printable(tok):
		return errors.New("token: want printable ASCII without spaces")
	}
	return nil
}

// printable reports whether s is all printable ASCII without spaces.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
