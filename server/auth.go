package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/dlmhq/dlm/server/auth"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// AuthorizationHeader is the gRPC metadata key and HTTP header that carry
// a bearer token: "Bearer <token>".
const AuthorizationHeader = "authorization"

// principal is who a request comes from, and what it may do.
type principal struct {
	identity string // "" when unauthenticated, or with authentication off
	open     bool   // authentication is off: everything is allowed
	rules    *auth.Rules
	// login is the login cookie's value when the identity came from it
	// (an HTTP GET): what the request does lasts only as long as the
	// login (see authenticator.current).
	login string
}

// authenticated reports whether the request may go on at all.
func (p principal) authenticated() bool { return p.open || p.identity != "" }

// may reports whether p has permission perm on name.
func (p principal) may(perm auth.Permission, name string) bool {
	return p.open || (p.identity != "" && p.rules.Allows(p.identity, perm, name))
}

// prefixes returns the prefixes on which p has perm (lock or list): [""]
// is every name, empty none.
func (p principal) prefixes(perm auth.Permission) []string {
	if p.open {
		return []string{""}
	}
	if p.identity == "" {
		return nil
	}
	return p.rules.Prefixes(p.identity, perm)
}

// mayAny reports whether p has perm on some name (for admin: at all).
func (p principal) mayAny(perm auth.Permission) bool {
	if perm == auth.PermissionAdmin {
		return p.may(auth.PermissionAdmin, "")
	}
	return len(p.prefixes(perm)) > 0
}

type principalKey struct{}

// withPrincipal returns ctx carrying p.
func withPrincipal(ctx context.Context, p principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// authenticator finds the principal of gRPC calls and HTTP requests.
type authenticator struct {
	tokens  *auth.Tokens // nil: no tokens
	certs   bool         // client certificates name identities
	rules   *auth.Rules
	logins  *logins
	log     *slog.Logger
	metrics *serverMetrics
}

// enabled reports whether authentication is on.
func (a *authenticator) enabled() bool { return a.tokens != nil || a.certs }

// caller returns the principal of a request: the open principal when
// authentication is off, else the one the interceptor or the HTTP
// middleware attached (an unauthenticated one if none).
func (s *Server) caller(ctx context.Context) principal {
	if !s.auth.enabled() {
		return principal{open: true}
	}
	p, _ := ctx.Value(principalKey{}).(principal)
	p.rules = s.auth.rules
	return p
}

// fromGRPC authenticates a gRPC call: its bearer token if it sends one,
// else its verified client certificate.
func (a *authenticator) fromGRPC(ctx context.Context) (principal, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	remote := ""
	var state *credentials.TLSInfo
	if pr, ok := peer.FromContext(ctx); ok {
		remote = pr.Addr.String()
		if ti, ok := pr.AuthInfo.(credentials.TLSInfo); ok {
			state = &ti
		}
	}
	id, how, err := a.identify(md.Get(AuthorizationHeader), func() (string, bool) {
		if state == nil || len(state.State.VerifiedChains) == 0 {
			return "", false
		}
		return state.State.VerifiedChains[0][0].Subject.CommonName, true
	})
	if err != nil {
		a.refuse(remote, how)
		return principal{}, fmt.Errorf("%w (%s)", err, how)
	}
	return principal{identity: id, rules: a.rules}, nil
}

// fromHTTP authenticates an HTTP request: its bearer token if it sends
// one, else its verified client certificate, else (if cookieOK) its login
// cookie.
func (a *authenticator) fromHTTP(r *http.Request, cookieOK bool) (principal, error) {
	login := ""
	id, how, err := a.identify(r.Header.Values(AuthorizationHeader), func() (string, bool) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			return r.TLS.VerifiedChains[0][0].Subject.CommonName, true
		}
		if cookieOK {
			if c, err := r.Cookie(loginCookie); err == nil {
				if id, ok := a.logins.identity(c.Value); ok {
					login = c.Value
					return id, true
				}
			}
		}
		return "", false
	})
	if err != nil {
		a.refuse(r.RemoteAddr, how)
		return principal{}, fmt.Errorf("%w (%s)", err, how)
	}
	return principal{identity: id, rules: a.rules, login: login}, nil
}

// current reports whether p's credentials still hold: a principal of a
// login cookie only while the login lives (until logout or expiry).
// Long-lived requests (the event feed) check it as they go.
func (a *authenticator) current(p principal) bool {
	if p.login == "" {
		return true
	}
	id, ok := a.logins.identity(p.login)
	return ok && id == p.identity
}

// identify finds the identity of a request from its authorization values,
// or from other (a certificate or a cookie). how says what failed; it
// never holds a credential, and is told to the client.
func (a *authenticator) identify(headers []string, other func() (string, bool)) (id, how string, err error) {
	switch {
	case len(headers) > 1:
		return "", "several authorization values", auth.ErrUnauthenticated
	case len(headers) == 1:
		tok, ok := bearerToken(headers[0])
		if !ok {
			return "", "malformed authorization value (want \"Bearer <token>\")", auth.ErrUnauthenticated
		}
		if a.tokens == nil {
			return "", "bearer token sent, but this server has no tokens", auth.ErrUnauthenticated
		}
		id, ok := a.tokens.Identity(tok)
		if !ok {
			return "", "unknown bearer token", auth.ErrUnauthenticated
		}
		return id, "", nil
	}
	if id, ok := other(); ok {
		if auth.CheckCertIdentity(id) != nil {
			return "", "certificate common name is not a valid identity", auth.ErrUnauthenticated
		}
		return id, "", nil
	}
	return "", "no credentials", auth.ErrUnauthenticated
}

// refuse logs and counts an authentication failure; never a credential.
func (a *authenticator) refuse(remote, why string) {
	a.metrics.authRefused.WithLabelValues("unauthenticated").Inc()
	level := slog.LevelWarn
	if why == "no credentials" {
		level = slog.LevelDebug // a browser before its login, a probe
	}
	a.log.Log(context.Background(), level, "dlm server: authentication failed", "remote", remote, "reason", why)
}

// deny logs and counts a permission refusal.
func (a *authenticator) deny(p principal, perm auth.Permission, name string) {
	a.metrics.authRefused.WithLabelValues("permission_denied").Inc()
	a.log.Info("dlm server: permission denied", "identity", p.identity, "permission", perm.String(), "name", name)
}

// bearerToken returns the token of an authorization value "Bearer <token>"
// (the scheme in any case).
func bearerToken(v string) (string, bool) {
	scheme, tok, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != "" && auth.Printable(tok)
}

// unaryAuth authenticates unary calls.
func (a *authenticator) unaryAuth(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	p, err := a.fromGRPC(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return h(withPrincipal(ctx, p), req)
}

// streamAuth authenticates streams, before their first message.
func (a *authenticator) streamAuth(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	p, err := a.fromGRPC(ss.Context())
	if err != nil {
		return status.Error(codes.Unauthenticated, err.Error())
	}
	return h(srv, &authStream{ServerStream: ss, ctx: withPrincipal(ss.Context(), p)})
}

// authStream is a stream whose context carries its principal.
type authStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, with its principal.
func (s *authStream) Context() context.Context { return s.ctx }

// presentedToken returns the bearer token a gRPC call sent, if any: only
// to keep it out of what the server stores (labels, metadata).
func presentedToken(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(AuthorizationHeader)
	if len(v) != 1 {
		return ""
	}
	tok, _ := bearerToken(v[0])
	return tok
}

// permissionDenied is the gRPC error of a refused call.
func permissionDenied(msg string) error {
	return status.Error(codes.PermissionDenied, auth.ErrPermissionDenied.Error()+": "+msg)
}
