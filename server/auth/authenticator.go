package auth

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

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

// Principal is who a request comes from, and what it may do.
type Principal struct {
	identity string // "" when unauthenticated, or with authentication off
	open     bool   // authentication is off: everything is allowed
	rules    *Rules
	// login is the login cookie's value when the identity came from it
	// (an HTTP GET): what the request does lasts only as long as the
	// login (see Authenticator.Current).
	login string
}

// Unrestricted returns the principal of a server without authentication:
// it may do everything.
func Unrestricted() Principal { return Principal{open: true} }

// NewPrincipal returns the principal of identity under rules.
func NewPrincipal(identity string, rules *Rules) Principal {
	return Principal{identity: identity, rules: rules}
}

// Identity returns the principal's identity: "" when unauthenticated or
// unrestricted.
func (p Principal) Identity() string { return p.identity }

// IsUnrestricted reports whether authentication is off: everything is
// allowed.
func (p Principal) IsUnrestricted() bool { return p.open }

// Authenticated reports whether the request may go on at all.
func (p Principal) Authenticated() bool { return p.open || p.identity != "" }

// May reports whether p has permission perm on name.
func (p Principal) May(perm Permission, name string) bool {
	return p.open || (p.identity != "" && p.rules.Allows(p.identity, perm, name))
}

// Prefixes returns the prefixes on which p has perm (lock or list): [""]
// is every name, empty none.
func (p Principal) Prefixes(perm Permission) []string {
	if p.open {
		return []string{""}
	}
	if p.identity == "" {
		return nil
	}
	return p.rules.Prefixes(p.identity, perm)
}

// MayAny reports whether p has perm on some name (for admin: at all).
func (p Principal) MayAny(perm Permission) bool {
	if perm == PermissionAdmin {
		return p.May(PermissionAdmin, "")
	}
	return len(p.Prefixes(perm)) > 0
}

type principalKey struct{}

// WithPrincipal returns ctx carrying p, as the interceptors and the HTTP
// middleware attach it.
func WithPrincipal(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, principalKey{}, p)
}

// Authenticator finds the Principal of gRPC calls and HTTP requests.
type Authenticator struct {
	tokens  *Tokens // nil: no tokens
	certs   bool    // client certificates name identities
	rules   *Rules
	logins  *Logins
	log     *slog.Logger
	refused func(kind string)
}

// Config configures an Authenticator.
type Config struct {
	// Tokens are the bearer tokens and their identities; nil: none.
	Tokens *Tokens
	// ClientCerts says that verified client certificates name identities
	// (their common name).
	ClientCerts bool
	// Rules authorize identities; nil grants every authenticated identity
	// every permission (AllowAll), with a warning. Rules without Tokens or
	// ClientCerts are a configuration error.
	Rules *Rules
	// Logger receives refusals (never a credential); nil discards them.
	Logger *slog.Logger
	// Refused, if not nil, is told of each refusal: "unauthenticated" or
	// "permission_denied" (for the metrics).
	Refused func(kind string)
}

// New returns an Authenticator, with authentication off if cfg has
// neither tokens nor client certificates. It fails with ErrAuthConfig for
// rules without either.
func New(cfg Config) (*Authenticator, error) {
	a := &Authenticator{tokens: cfg.Tokens, certs: cfg.ClientCerts, rules: cfg.Rules, logins: newLogins(),
		log: cfg.Logger, refused: cfg.Refused}
	if a.log == nil {
		a.log = slog.New(slog.DiscardHandler)
	}
	if a.refused == nil {
		a.refused = func(string) {}
	}
	switch {
	case !a.Enabled() && cfg.Rules != nil:
		return nil, fmt.Errorf("%w: authorization rules without authentication (no tokens, no client CA)", ErrAuthConfig)
	case a.Enabled() && cfg.Rules == nil:
		a.rules = AllowAll()
		a.log.Warn("dlm server: authentication without rules: every authenticated identity may do everything")
	}
	return a, nil
}

// Logins returns the browser logins the authenticator accepts.
func (a *Authenticator) Logins() *Logins { return a.logins }

// Caller returns the principal of a request: an unrestricted one when
// authentication is off, else the one the interceptor or the HTTP
// middleware attached (an unauthenticated one if none).
func (a *Authenticator) Caller(ctx context.Context) Principal {
	if !a.Enabled() {
		return Principal{open: true}
	}
	p, _ := ctx.Value(principalKey{}).(Principal)
	p.rules = a.rules
	return p
}

// Enabled reports whether authentication is on.
func (a *Authenticator) Enabled() bool { return a.tokens != nil || a.certs }

// fromGRPC authenticates a gRPC call: its bearer token if it sends one,
// else its verified client certificate.
func (a *Authenticator) fromGRPC(ctx context.Context) (Principal, error) {
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
		return Principal{}, fmt.Errorf("%w (%s)", err, how)
	}
	return Principal{identity: id, rules: a.rules}, nil
}

// FromHTTP authenticates an HTTP request: its bearer token if it sends
// one, else its verified client certificate, else (if cookieOK) its login
// cookie.
func (a *Authenticator) FromHTTP(r *http.Request, cookieOK bool) (Principal, error) {
	login := ""
	id, how, err := a.identify(r.Header.Values(AuthorizationHeader), func() (string, bool) {
		if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 {
			return r.TLS.VerifiedChains[0][0].Subject.CommonName, true
		}
		if cookieOK {
			if c, err := r.Cookie(LoginCookie); err == nil {
				if id, ok := a.logins.Identity(c.Value); ok {
					login = c.Value
					return id, true
				}
			}
		}
		return "", false
	})
	if err != nil {
		a.refuse(r.RemoteAddr, how)
		return Principal{}, fmt.Errorf("%w (%s)", err, how)
	}
	return Principal{identity: id, rules: a.rules, login: login}, nil
}

// Current reports whether p's credentials still hold: a Principal of a
// login cookie only while the login lives (until logout or expiry).
// Long-lived requests (the event feed) check it as they go.
func (a *Authenticator) Current(p Principal) bool {
	if p.login == "" {
		return true
	}
	id, ok := a.logins.Identity(p.login)
	return ok && id == p.identity
}

// identify finds the identity of a request from its authorization values,
// or from other (a certificate or a cookie). how says what failed; it
// never holds a credential, and is told to the client.
func (a *Authenticator) identify(headers []string, other func() (string, bool)) (id, how string, err error) {
	switch {
	case len(headers) > 1:
		return "", "several authorization values", ErrUnauthenticated
	case len(headers) == 1:
		tok, ok := bearerToken(headers[0])
		if !ok {
			return "", "malformed authorization value (want \"Bearer <token>\")", ErrUnauthenticated
		}
		if a.tokens == nil {
			return "", "bearer token sent, but this server has no tokens", ErrUnauthenticated
		}
		id, ok := a.tokens.Identity(tok)
		if !ok {
			return "", "unknown bearer token", ErrUnauthenticated
		}
		return id, "", nil
	}
	if id, ok := other(); ok {
		if checkCertIdentity(id) != nil {
			return "", "certificate common name is not a valid identity", ErrUnauthenticated
		}
		return id, "", nil
	}
	return "", "no credentials", ErrUnauthenticated
}

// refuse logs and counts an authentication failure; never a credential.
func (a *Authenticator) refuse(remote, why string) {
	a.refused("unauthenticated")
	level := slog.LevelWarn
	if why == "no credentials" {
		level = slog.LevelDebug // a browser before its login, a probe
	}
	a.log.Log(context.Background(), level, "dlm server: authentication failed", "remote", remote, "reason", why)
}

// Deny logs and counts a permission refusal.
func (a *Authenticator) Deny(p Principal, perm Permission, name string) {
	a.refused("permission_denied")
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
	return tok, tok != "" && printable(tok)
}

// UnaryInterceptor authenticates unary calls.
func (a *Authenticator) UnaryInterceptor(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	if isHealth(info.FullMethod) {
		return h(ctx, req)
	}
	p, err := a.fromGRPC(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return h(WithPrincipal(ctx, p), req)
}

// StreamInterceptor authenticates streams, before their first message.
func (a *Authenticator) StreamInterceptor(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, h grpc.StreamHandler) error {
	if isHealth(info.FullMethod) {
		return h(srv, ss)
	}
	ctx, err := a.Authenticate(ss.Context())
	if err != nil {
		return err
	}
	return h(srv, &authStream{ServerStream: ss, ctx: ctx})
}

// Authenticate authenticates a stream as StreamInterceptor does, from the
// gRPC metadata and peer in ctx: it returns ctx carrying the Principal,
// or an Unauthenticated status. The session transport over TCP, which
// has no interceptors, builds that context itself.
func (a *Authenticator) Authenticate(ctx context.Context) (context.Context, error) {
	p, err := a.fromGRPC(ctx)
	if err != nil {
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	return WithPrincipal(ctx, p), nil
}

// isHealth reports whether a gRPC method is of the health service
// (grpc.health.v1), which needs no credentials, as GET /readyz needs none:
// probes and load balancers carry none.
func isHealth(method string) bool { return strings.HasPrefix(method, "/grpc.health.v1.Health/") }

// authStream is a stream whose context carries its Principal.
type authStream struct {
	grpc.ServerStream
	ctx context.Context
}

// Context returns the stream's context, with its Principal.
func (s *authStream) Context() context.Context { return s.ctx }

// PresentedToken returns the bearer token a gRPC call sent, if any: only
// to keep it out of what the server stores (labels, metadata).
func PresentedToken(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get(AuthorizationHeader)
	if len(v) != 1 {
		return ""
	}
	tok, _ := bearerToken(v[0])
	return tok
}
