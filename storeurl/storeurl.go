// Package storeurl opens a dlm lock store from a URL, so that tools and
// configuration files can name a store in one string:
//
//	dlm://host:port[,host:port...][?session_ttl=10s&keepalive=2.5s&label=NAME&transport=tcp|grpc]
//	dlm://host:port[?tls=true&ca=FILE&cert=FILE&key=FILE&server_name=NAME&token_file=FILE]
//	dlms://...                            (the same, over TLS)
//	redis://[user:password@]host:port[/db][?prefix=dlm:&queue_refresh=500ms&...]
//	rediss://...                          (the same, over TLS)
//	redlock://[user:password@]host:port,host:port,...[/db][?prefix=&drift=0.01&node_timeout=250ms]
//	postgres://user:password@host:port/db[?sequence=dlm_fence&pooler_check=true&sessions=2&...]
//	postgresql://...                      (the same)
//	etcd://host:port[,host:port...][?prefix=dlm/&request_timeout=5s]
//
// Parameters the store does not take are passed on: a redis URL's to
// go-redis (dial_timeout, pool_size, ...), a postgres URL's to pgx (sslmode,
// pool_max_conns, ...). An unknown parameter is an error, never ignored.
// DefaultURL, the local dlm server, is used when the URL is empty.
//
// A URL holds credentials: show it with Redact, never as given. A dlm
// server's token never goes in a URL: token_file names the file that holds
// it (see DLMSecurity).
package storeurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/postgres"
)

// DefaultURL is the store used when none is named: the dlm server that
// `dlm server` runs on this machine by default.
const DefaultURL = "dlm://127.0.0.1:7420"

// MaxURLBytes is the longest URL accepted.
const MaxURLBytes = 4096

// MaxHosts is the largest number of hosts in one URL (a dlm:// URL takes at
// most dlmserver.MaxServers).
const MaxHosts = 64

// Default ports, used when a host has none.
const (
	DefaultDLMPort   = "7420"
	DefaultRedisPort = "6379"
	DefaultEtcdPort  = "2379"
)

// ErrBadURL is returned, wrapped with what is wrong, for a URL that does not
// name a store. It also matches driver.ErrInvalid.
var ErrBadURL = fmt.Errorf("%w: bad store URL", driver.ErrInvalid)

// Kind is the store a URL names.
type Kind string

// The kinds of store.
const (
	KindDLM      Kind = "dlm"
	KindRedis    Kind = "redis"
	KindRedlock  Kind = "redlock"
	KindPostgres Kind = "postgres"
	KindEtcd     Kind = "etcd"
)

// Spec is a parsed store URL.
type Spec struct {
	// Kind is the store.
	Kind Kind
	// Hosts are the host:port addresses, each with a port (the default
	// one where the URL had none). Empty for postgres, whose URL pgx
	// reads as it is.
	Hosts []string
	// URL is the parsed URL with the parameters Params took out.
	URL *url.URL
	// Params are the dlm parameters of the URL, checked against the
	// store's list.
	Params map[string]string
	// TLS is true for rediss, dlms, and dlm with tls=true or any of the
	// ca, cert, key and server_name parameters.
	TLS bool
}

// params lists the dlm parameters each kind takes. Other parameters are
// passed on to the client library (redis, postgres) or are errors.
var params = map[Kind][]string{
	KindDLM:      {"session_ttl", "keepalive", "label", "transport", "tls", "ca", "cert", "key", "server_name", "token_file"},
	KindRedis:    {"prefix", "queue_refresh", "fence_retention"},
	KindRedlock:  {"prefix", "drift", "node_timeout", "fence_retention"},
	KindPostgres: {"sequence", "pooler_check", "setup", "sessions"},
	KindEtcd:     {"prefix", "request_timeout"},
}

// passOn reports whether a kind passes its other parameters to its client
// library.
func passOn(k Kind) bool { return k == KindRedis || k == KindRedlock || k == KindPostgres }

// Parse checks rawURL and splits it into a Spec without connecting to
// anything. An empty rawURL is DefaultURL.
func Parse(rawURL string) (*Spec, error) {
	if rawURL == "" {
		rawURL = DefaultURL
	}
	if len(rawURL) > MaxURLBytes {
		return nil, fmt.Errorf("%w: longer than %d bytes", ErrBadURL, MaxURLBytes)
	}
	u, err := parseURL(rawURL)
	if err != nil {
		// url's error repeats the URL, credentials included.
		return nil, fmt.Errorf("%w: %s", ErrBadURL, urlErr(err, rawURL))
	}
	spec := &Spec{URL: u, Params: map[string]string{}}
	switch u.Scheme {
	case "dlm", "dlms":
		spec.Kind, spec.TLS = KindDLM, u.Scheme == "dlms"
	case "redis", "rediss":
		spec.Kind, spec.TLS = KindRedis, u.Scheme == "rediss"
	case "redlock":
		spec.Kind = KindRedlock
	case "postgres", "postgresql":
		spec.Kind = KindPostgres
	case "etcd":
		spec.Kind = KindEtcd
	case "":
		return nil, fmt.Errorf("%w: %q has no scheme; want dlm://, dlms://, redis://, rediss://, redlock://, postgres:// or etcd://", ErrBadURL, Redact(rawURL))
	default:
		return nil, fmt.Errorf("%w: unknown scheme %q; want dlm, dlms, redis, rediss, redlock, postgres or etcd", ErrBadURL, u.Scheme)
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: %s: want %s://host:port", ErrBadURL, Redact(rawURL), u.Scheme)
	}
	cut := cutUserPart(u)
	if cut && (strings.Contains(u.EscapedPath(), "@") || strings.Contains(u.EscapedFragment(), "@") || atInParamName(u.RawQuery)) {
		// Never legitimate: a user part cut short, whose rest would be
		// taken for the host, path, query or fragment (and quoted).
		return nil, fmt.Errorf("%w: %s URL with an @ after the host: %s", ErrBadURL, spec.Kind, encodeHint)
	}
	if err := spec.takeParams(); err != nil {
		return nil, err
	}
	if err := spec.checkParams(); err != nil {
		if cut { // a parameter's value quoted in err may be a piece of a password
			return nil, fmt.Errorf("%w: %s URL: bad parameter values, or %s", ErrBadURL, spec.Kind, encodeHint)
		}
		return nil, err
	}
	if err := spec.checkDLMSecurity(); err != nil {
		return nil, err
	}
	if spec.Kind == KindPostgres {
		return spec, nil
	}
	if err := spec.splitHosts(); err != nil {
		return nil, err
	}
	if (spec.Kind == KindDLM || spec.Kind == KindEtcd) && u.User != nil {
		return nil, fmt.Errorf("%w: %s URLs take no user or password", ErrBadURL, spec.Kind)
	}
	if (spec.Kind == KindDLM || spec.Kind == KindEtcd) && strings.Trim(u.Path, "/") != "" {
		return nil, fmt.Errorf("%w: %s URLs take no path, got %q", ErrBadURL, spec.Kind, u.Path)
	}
	if spec.Kind == KindRedis && len(spec.Hosts) != 1 {
		return nil, fmt.Errorf("%w: a redis URL names one host, got %d (use redlock:// for several independent masters)", ErrBadURL, len(spec.Hosts))
	}
	return spec, nil
}

// takeParams moves the kind's parameters from the query into Params and
// rejects unknown ones where nothing else would read them.
func (s *Spec) takeParams() error {
	q, err := url.ParseQuery(s.URL.RawQuery)
	if err != nil {
		return fmt.Errorf("%w: query: %s", ErrBadURL, urlErr(err, s.URL.RawQuery))
	}
	for _, name := range params[s.Kind] {
		vs, ok := q[name]
		if !ok {
			continue
		}
		if len(vs) != 1 {
			return fmt.Errorf("%w: parameter %s given %d times", ErrBadURL, name, len(vs))
		}
		s.Params[name] = vs[0]
		delete(q, name)
	}
	if len(q) > 0 && !passOn(s.Kind) {
		if q.Has("token") && s.Kind == KindDLM {
			return fmt.Errorf("%w: a token never goes in a URL: put it in a file and name the file with token_file= (or DLM_TOKEN_FILE)", ErrBadURL)
		}
		for name := range q {
			return fmt.Errorf("%w: %s URLs have no parameter %q (they take %s)", ErrBadURL, s.Kind, name, strings.Join(params[s.Kind], ", "))
		}
	}
	s.URL.RawQuery = q.Encode()
	return nil
}

// splitHosts fills Hosts from a comma-separated host list.
func (s *Spec) splitHosts() error {
	if s.URL.Host == "" {
		return fmt.Errorf("%w: %s URL names no host", ErrBadURL, s.Kind)
	}
	port := map[Kind]string{KindDLM: DefaultDLMPort, KindRedis: DefaultRedisPort, KindRedlock: DefaultRedisPort, KindEtcd: DefaultEtcdPort}[s.Kind]
	parts := strings.Split(s.URL.Host, ",")
	if len(parts) > MaxHosts {
		return fmt.Errorf("%w: %d hosts, at most %d", ErrBadURL, len(parts), MaxHosts)
	}
	seen := map[string]bool{}
	for _, h := range parts {
		if h == "" {
			return fmt.Errorf("%w: empty host in %q", ErrBadURL, s.URL.Host)
		}
		host, p, err := net.SplitHostPort(h)
		if err != nil {
			host, p = h, port
			if strings.Contains(h, ":") && !strings.HasPrefix(h, "[") {
				return fmt.Errorf("%w: host %q: %v", ErrBadURL, h, err)
			}
			host = strings.Trim(host, "[]")
		}
		if host == "" {
			return fmt.Errorf("%w: host %q has no name", ErrBadURL, h)
		}
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Errorf("%w: host %q: port %q is not a number from 1 to 65535", ErrBadURL, h, p)
		}
		addr := net.JoinHostPort(host, p)
		if seen[addr] {
			return fmt.Errorf("%w: host %s named twice", ErrBadURL, addr)
		}
		seen[addr] = true
		s.Hosts = append(s.Hosts, addr)
	}
	return nil
}

// parseURL parses rawURL, which may name several hosts (a:1,b:2), each
// parsed as url.Parse parses a URL's host (an IPv6 address in brackets, with
// its zone escaped as %25).
func parseURL(rawURL string) (*url.URL, error) {
	// A host list is not a host url.Parse accepts: take it out, parse the
	// rest, and put it back, each host parsed on its own.
	hosts, rest := cutHosts(rawURL)
	u, err := url.Parse(rest)
	if err != nil || hosts == "" {
		return u, err
	}
	parts := strings.Split(hosts, ",")
	for i, h := range parts {
		hu, err := url.Parse("//" + h)
		if err != nil {
			return nil, err
		}
		parts[i] = hu.Host
	}
	u.Host = strings.Join(parts, ",")
	return u, nil
}

// cutHosts returns the host list of rawURL when it has several hosts, and
// rawURL with that list replaced by a single placeholder host; otherwise ""
// and rawURL unchanged.
func cutHosts(rawURL string) (hosts, rest string) {
	i := strings.Index(rawURL, "://")
	if i < 0 {
		return "", rawURL
	}
	start := i + 3
	end := len(rawURL)
	if j := strings.IndexAny(rawURL[start:], "/?#"); j >= 0 {
		end = start + j
	}
	if at := strings.LastIndex(rawURL[start:end], "@"); at >= 0 {
		start += at + 1
	}
	hosts = rawURL[start:end]
	if !strings.Contains(hosts, ",") {
		return "", rawURL
	}
	return hosts, rawURL[:start] + "hosts" + rawURL[end:]
}

// kinds of parameter values, checked by Parse.
var (
	durationParams = []string{"session_ttl", "keepalive", "queue_refresh", "fence_retention", "node_timeout", "request_timeout"}
	boolParams     = []string{"pooler_check", "setup", "tls"}
)

// checkParams checks the values of the dlm parameters.
func (s *Spec) checkParams() error {
	for _, name := range durationParams {
		if _, err := s.duration(name, 0); err != nil {
			return err
		}
	}
	for _, name := range boolParams {
		if _, err := s.boolean(name, false); err != nil {
			return err
		}
	}
	if v, ok := s.Params["drift"]; ok {
		if _, err := s.drift(v); err != nil {
			return err
		}
	}
	if _, err := s.sessions(); err != nil {
		return err
	}
	return nil
}

// sessions reads the postgres parameter sessions, or its default.
func (s *Spec) sessions() (int, error) {
	v, ok := s.Params["sessions"]
	if !ok {
		return postgres.DefaultSessions, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > postgres.MaxSessions {
		return 0, fmt.Errorf("%w: parameter sessions=%q: want a number of shared sessions from 0 to %d", ErrBadURL, v, postgres.MaxSessions)
	}
	return n, nil
}

// drift parses a drift factor.
func (s *Spec) drift(v string) (float64, error) {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || !(f >= 0 && f < 1) {
		return 0, fmt.Errorf("%w: parameter drift=%q: want a fraction of the TTL from 0 to below 1, such as 0.01", ErrBadURL, v)
	}
	return f, nil
}

// duration reads the duration parameter name, or def when absent.
func (s *Spec) duration(name string, def time.Duration) (time.Duration, error) {
	v, ok := s.Params[name]
	if !ok {
		return def, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%w: parameter %s=%q: want a positive duration such as 500ms", ErrBadURL, name, v)
	}
	return d, nil
}

// boolean reads the boolean parameter name, or def when absent.
func (s *Spec) boolean(name string, def bool) (bool, error) {
	v, ok := s.Params[name]
	if !ok {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("%w: parameter %s=%q: want true or false", ErrBadURL, name, v)
	}
	return b, nil
}

// encodeHint says how to write a user name or password that cuts a URL short.
const encodeHint = "characters such as / ? # @ in a user name or password must be percent-encoded (%2F %3F %23 %40)"

// cutUserPart reports whether u may be a URL whose user part was cut short
// by a / ? or # that should have been percent-encoded (user:pa/ss@host
// parses as host "user:pa" and path "/ss@host"): it has no user part, but
// an @ comes after its host. Pieces of a password may then be anywhere in
// u, and must not be shown.
func cutUserPart(u *url.URL) bool {
	return u.User == nil && (strings.Contains(u.EscapedPath(), "@") || strings.Contains(u.RawQuery, "@") ||
		strings.Contains(u.EscapedFragment(), "@"))
}

// atInParamName reports whether a query has a parameter whose name holds an
// @, as written.
func atInParamName(rawQuery string) bool {
	for _, kv := range strings.Split(rawQuery, "&") {
		name, _, _ := strings.Cut(kv, "=")
		if strings.Contains(name, "@") {
			return true
		}
	}
	return false
}

// Redact returns rawURL with its password (in the user part or a password
// parameter) and any token parameter replaced by "xxxxx", and without its
// fragment, for logs and messages. A URL that does not parse (its query
// included) is returned as its scheme only, and so is a string that is not
// a URL with an authority part (scheme://...), such as a key=value
// connection string or scheme:user:password@host, where no password can be
// told apart, and a URL with an @ after its host but none before, whose
// user part may have been cut short by a / ? or # in a password
// (user:pa/ss@host).
func Redact(rawURL string) string {
	u, err := parseURL(rawURL)
	var q url.Values
	if err == nil {
		// A query that does not parse may hide a password parameter
		// (u.Query drops the pairs it cannot read).
		q, err = url.ParseQuery(u.RawQuery)
	}
	if err != nil || cutUserPart(u) {
		if i := strings.Index(rawURL, "://"); i > 0 && i < 16 {
			return rawURL[:i] + "://..."
		}
		if err == nil && u.Scheme != "" && len(u.Scheme) < 16 {
			return u.Scheme + ":..."
		}
		return "(unparsable URL)"
	}
	if !strings.HasPrefix(strings.TrimPrefix(rawURL[len(u.Scheme):], ":"), "//") {
		if u.Scheme != "" && len(u.Scheme) < 16 {
			return u.Scheme + ":..."
		}
		return "(not a URL)"
	}
	redacted := false
	for _, k := range []string{"password", "token"} {
		if q.Has(k) {
			q.Set(k, "xxxxx")
			redacted = true
		}
	}
	if redacted {
		u.RawQuery = q.Encode()
	}
	// A store URL has no use for a fragment, which may be the rest of a
	// password parameter cut short by an unencoded #.
	u.Fragment, u.RawFragment = "", ""
	return u.Redacted()
}

// urlErr is the cause inside a url error, without the URL it repeats. The
// cause may quote a piece of the URL (a port, an escape); when the URL has a
// user part or a password parameter, that piece may be part of the password
// (one with an unencoded / ? or # cuts the host short there, and the rest
// of the password is taken for the port), so only a hint is given.
func urlErr(err error, rawURL string) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	if strings.Contains(rawURL, "@") || strings.Contains(strings.ToLower(rawURL), "password") {
		return "it does not parse (characters such as / ? # @ : % in a user name or password must be percent-encoded)"
	}
	return err.Error()
}
