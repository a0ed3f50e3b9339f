package auth

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"sync"
	"time"
)

// Browser logins (the dashboard): EventSource cannot send an Authorization
// header, so the page trades a bearer token for a cookie once, with
// POST /v1/login. The cookie holds a random login id; the server keeps
// only its SHA-256 hash, with the identity, in memory (so logins do not
// survive a restart and are per node). The token itself is never stored.
const (
	// LoginTTL is how long a login lasts.
	LoginTTL = 8 * time.Hour
	// MaxLogins bounds the logins a node keeps; past it, the oldest goes.
	MaxLogins = 1024
	// LoginCookie is the cookie's name.
	LoginCookie = "dlm_login"
)

// Logins are the live browser logins of a node. They are safe for
// concurrent use.
type Logins struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]login
}

type login struct {
	identity string
	expires  time.Time
}

// newLogins returns an empty set of logins.
func newLogins() *Logins { return &Logins{m: map[[sha256.Size]byte]login{}} }

// Create makes a login for identity and returns the cookie value.
func (l *Logins) Create(identity string, now time.Time) (string, error) {
	var id [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", err
	}
	value := base64.RawURLEncoding.EncodeToString(id[:])
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.m) >= MaxLogins {
		l.evictLocked(now)
	}
	l.m[sha256.Sum256([]byte(value))] = login{identity: identity, expires: now.Add(LoginTTL)}
	return value, nil
}

// evictLocked drops the expired logins, or, if none is, the oldest.
func (l *Logins) evictLocked(now time.Time) {
	var oldest [sha256.Size]byte
	var oldestAt time.Time
	dropped := false
	for k, v := range l.m {
		if now.After(v.expires) {
			delete(l.m, k)
			dropped = true
		} else if oldestAt.IsZero() || v.expires.Before(oldestAt) {
			oldest, oldestAt = k, v.expires
		}
	}
	if !dropped && !oldestAt.IsZero() {
		delete(l.m, oldest)
	}
}

// Identity returns the identity of a live login.
func (l *Logins) Identity(value string) (string, bool) {
	if len(value) > 64 {
		return "", false
	}
	k := sha256.Sum256([]byte(value))
	l.mu.Lock()
	defer l.mu.Unlock()
	v, ok := l.m[k]
	if !ok {
		return "", false
	}
	if time.Now().After(v.expires) {
		delete(l.m, k)
		return "", false
	}
	return v.identity, true
}

// Remove ends a login.
func (l *Logins) Remove(value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, sha256.Sum256([]byte(value)))
}
