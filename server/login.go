package server

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"sync"
	"time"

	"github.com/dlmhq/dlm/server/auth"
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
	// loginCookie is the cookie's name.
	loginCookie = "dlm_login"
)

// logins are the live browser logins of a node.
type logins struct {
	mu sync.Mutex
	m  map[[sha256.Size]byte]login
}

type login struct {
	identity string
	expires  time.Time
}

func newLogins() *logins { return &logins{m: map[[sha256.Size]byte]login{}} }

// create makes a login for identity and returns the cookie value.
func (l *logins) create(identity string, now time.Time) (string, error) {
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
func (l *logins) evictLocked(now time.Time) {
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

// identity returns the identity of a live login.
func (l *logins) identity(value string) (string, bool) {
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

// remove ends a login.
func (l *logins) remove(value string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.m, sha256.Sum256([]byte(value)))
}

// httpLogin serves POST /v1/login: a request authenticated by a bearer
// token gets a login cookie (HttpOnly, SameSite=Strict, Secure over TLS,
// path /), which GET requests may then use instead of the token. Without
// authentication it answers 204 and sets nothing.
func (s *Server) httpLogin(w http.ResponseWriter, r *http.Request) {
	if !s.auth.enabled() {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if len(r.Header.Values(AuthorizationHeader)) == 0 {
		unauthorized(w, "send the token as Authorization: Bearer <token>")
		return
	}
	p, err := s.auth.fromHTTP(r, false)
	if err != nil {
		unauthorized(w, err.Error())
		return
	}
	value, err := s.auth.logins.create(p.identity, time.Now())
	if err != nil {
		http.Error(w, "cannot make a login", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: loginCookie, Value: value, Path: "/", MaxAge: int(LoginTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	s.log.Info("dlm server: dashboard login", "identity", p.identity, "remote", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
}

// httpLogout serves POST /v1/logout: it ends the request's login, if any,
// and clears the cookie.
func (s *Server) httpLogout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(loginCookie); err == nil {
		s.auth.logins.remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: loginCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}

// whoami is the answer of GET /v1/whoami.
type whoami struct {
	// Auth is true when the server authenticates clients.
	Auth bool `json:"auth"`
	// Identity is the caller's ("" without authentication).
	Identity string `json:"identity,omitempty"`
	// Lock and List are the name prefixes the caller may lock and list
	// ("" is every name); Admin says whether it may change membership.
	Lock  []string `json:"lock"`
	List  []string `json:"list"`
	Admin bool     `json:"admin"`
}

// httpWhoami serves GET /v1/whoami: the caller's identity and permissions
// (401 without credentials).
func (s *Server) httpWhoami(w http.ResponseWriter, r *http.Request) {
	p := s.caller(r.Context())
	writeJSON(w, whoami{
		Auth: s.auth.enabled(), Identity: p.identity,
		Lock: p.prefixes(auth.PermissionLock), List: p.prefixes(auth.PermissionList), Admin: p.mayAny(auth.PermissionAdmin),
	})
}
