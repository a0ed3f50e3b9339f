package httpapi

import (
	"net/http"
	"time"

	"github.com/dlmhq/dlm/server/auth"
)

// login serves POST /v1/login: a request authenticated by a bearer
// token gets a login cookie (HttpOnly, SameSite=Strict, Secure over TLS,
// path /), which GET requests may then use instead of the token. Without
// authentication it answers 204 and sets nothing.
func (a *api) login(w http.ResponseWriter, r *http.Request) {
	if !a.auth.Enabled() {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if len(r.Header.Values(auth.AuthorizationHeader)) == 0 {
		unauthorized(w, "send the token as Authorization: Bearer <token>")
		return
	}
	p, err := a.auth.FromHTTP(r, false)
	if err != nil {
		unauthorized(w, err.Error())
		return
	}
	value, err := a.auth.Logins().Create(p.Identity(), time.Now())
	if err != nil {
		http.Error(w, "cannot make a login", http.StatusInternalServerError)
		return
	}
	http.SetCookie(w, &http.Cookie{
		Name: auth.LoginCookie, Value: value, Path: "/", MaxAge: int(auth.LoginTTL.Seconds()),
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	a.log.Info("dlm server: dashboard login", "identity", p.Identity(), "remote", r.RemoteAddr)
	w.WriteHeader(http.StatusNoContent)
}

// logout serves POST /v1/logout: it ends the request's login, if any,
// and clears the cookie.
func (a *api) logout(w http.ResponseWriter, r *http.Request) {
	if c, err := r.Cookie(auth.LoginCookie); err == nil {
		a.auth.Logins().Remove(c.Value)
	}
	http.SetCookie(w, &http.Cookie{
		Name: auth.LoginCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil,
	})
	w.WriteHeader(http.StatusNoContent)
}

// Whoami is the answer of GET /v1/whoami.
type Whoami struct {
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

// whoami serves GET /v1/whoami: the caller's identity and permissions
// (401 without credentials).
func (a *api) whoami(w http.ResponseWriter, r *http.Request) {
	p := a.auth.Caller(r.Context())
	writeJSON(w, Whoami{
		Auth: a.auth.Enabled(), Identity: p.Identity(),
		Lock: p.Prefixes(auth.PermissionLock), List: p.Prefixes(auth.PermissionList), Admin: p.MayAny(auth.PermissionAdmin),
	})
}
