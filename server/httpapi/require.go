package httpapi

import (
	"net/http"

	"github.com/dlmhq/dlm/server/auth"
)

// require wraps h for a server with authentication: the request must carry
// credentials (401 otherwise) and its identity must hold perm (403
// otherwise): for list, on some prefix (h filters by the caller's scope);
// 0 asks for credentials only. The login cookie counts for GET and HEAD
// requests only, so that no state-changing request rides on it. Without
// authentication, h serves everyone.
func (a *api) require(perm auth.Permission, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !a.auth.Enabled() {
			h.ServeHTTP(w, r)
			return
		}
		p, err := a.auth.FromHTTP(r, r.Method == http.MethodGet || r.Method == http.MethodHead)
		if err != nil {
			unauthorized(w, err.Error())
			return
		}
		if perm != 0 && !p.MayAny(perm) {
			a.auth.Deny(p, perm, "")
			http.Error(w, auth.ErrPermissionDenied.Error()+": identity "+p.Identity()+" has no "+perm.String()+" permission", http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), p)))
	})
}

// unauthorized answers 401 with a Bearer challenge (which browsers do not
// turn into a password prompt).
func unauthorized(w http.ResponseWriter, msg string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="dlm"`)
	http.Error(w, msg, http.StatusUnauthorized)
}
