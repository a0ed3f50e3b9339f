package storeurl_test

import (
	"errors"
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/storeurl"
)

// urlSeeds are the URLs of the table tests above, good and bad.
var urlSeeds = []string{
	"", "dlm://a:1,b:2?session_ttl=3s&label=x", "dlm://node", "redis://u:p@h:7000/2?prefix=app:&dial_timeout=1s",
	"rediss://h", "redlock://a:1,b:2,c?drift=0.02", "postgres://u:p@h/db?sslmode=disable&sequence=s",
	"postgresql://h/db", "etcd://[::1]:2379,e2", "etcd://[fe80::1%25eth0]:2379,e2", "mysql://h", "localhost:7420",
	"//h:1", "dlm://", "dlm://a:1,,b:2", "dlm://[::1,b:2", "dlm://a:1,a:1", "dlm://a:0", "dlm://h?ttl=1s",
	"dlm://h?session_ttl=-1s", "dlm://u:p@h", "dlm://h/path", "redis://a:1,b:2", "redis:opaque", "dlm://h:1?%zz",
	"redis://user:s3cret/x@h:1", "redis://user:s3cret?x@h:1", "redlock://user:s3cret#x@a:1,b:2",
	"postgres://user:s3c%zzret@h/db", "postgres://h/db?password=s3c%zzret", "host=h user=u password=s3cret dbname=db",
	"redis:user:s3cret@h", "postgres:///db?password=pw", "redlock://u:pw@a:1,b/0", "redis://u:pw@h:1%zz",
	"redis://user:123/S3cret9@h", "dlm://user:1/S3cret9@h", "redis://user:123?S3cret9@h", "dlm://user:1#S3cret9@h",
	"dlm://h?label=worker@host", "etcd://a,b?request_timeout=2s&prefix=p/",
}

// FuzzParse checks Parse and Redact on any string: no panic; every error
// matches ErrBadURL (and so driver.ErrInvalid); a URL that parses names
// well-formed hosts, and its redacted form, unless it shows the scheme only,
// parses to the same store.
func FuzzParse(f *testing.F) {
	for _, u := range urlSeeds {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		red := storeurl.Redact(raw)
		spec, err := storeurl.Parse(raw)
		if err != nil {
			if !errors.Is(err, storeurl.ErrBadURL) || !errors.Is(err, driver.ErrInvalid) {
				t.Fatalf("Parse(%q): %v does not match ErrBadURL and driver.ErrInvalid", raw, err)
			}
			return
		}
		checkSpec(t, raw, spec)
		if raw == "" || strings.HasSuffix(red, "...") || strings.HasPrefix(red, "(") {
			return // the default URL, or one Redact shows as its scheme only
		}
		again, err := storeurl.Parse(red)
		if err != nil {
			t.Fatalf("Parse(%q) succeeds, but not its redacted form %q: %v", raw, red, err)
		}
		if again.Kind != spec.Kind || again.TLS != spec.TLS || !slices.Equal(again.Hosts, spec.Hosts) ||
			len(again.Params) != len(spec.Params) {
			t.Fatalf("Parse(%q) = %+v, but its redacted form %q gives %+v", raw, spec, red, again)
		}
		for k, v := range spec.Params {
			if again.Params[k] != v {
				t.Fatalf("Parse(%q): parameter %s=%q, %q in the redacted form %q", raw, k, v, again.Params[k], red)
			}
		}
	})
}

// checkSpec checks a parsed URL: a known kind, hosts with a port in range
// named once each (none for postgres), no credentials where the kind takes
// none.
func checkSpec(t *testing.T, raw string, spec *storeurl.Spec) {
	t.Helper()
	switch spec.Kind {
	case storeurl.KindPostgres:
		if len(spec.Hosts) != 0 {
			t.Fatalf("Parse(%q): postgres hosts %q", raw, spec.Hosts)
		}
		return
	case storeurl.KindDLM, storeurl.KindEtcd:
		if spec.URL.User != nil {
			t.Fatalf("Parse(%q): %s URL with a user", raw, spec.Kind)
		}
	case storeurl.KindRedis:
		if len(spec.Hosts) != 1 {
			t.Fatalf("Parse(%q): redis URL with hosts %q", raw, spec.Hosts)
		}
	case storeurl.KindRedlock:
	default:
		t.Fatalf("Parse(%q): kind %q", raw, spec.Kind)
	}
	if len(spec.Hosts) == 0 || len(spec.Hosts) > storeurl.MaxHosts {
		t.Fatalf("Parse(%q): %d hosts", raw, len(spec.Hosts))
	}
	seen := map[string]bool{}
	for _, h := range spec.Hosts {
		host, port, err := net.SplitHostPort(h)
		if n, perr := strconv.Atoi(port); err != nil || host == "" || perr != nil || n < 1 || n > 65535 || seen[h] {
			t.Fatalf("Parse(%q): host %q in %q", raw, h, spec.Hosts)
		}
		seen[h] = true
	}
}

// kinds are the schemes FuzzParseSecret builds URLs of.
var kinds = []string{"dlm", "redis", "rediss", "redlock", "postgres", "postgresql", "etcd", "ftp"}

// FuzzParseSecret builds a URL with a password, in its user part or as a
// password parameter, and checks that neither Parse's error nor Redact
// shows any piece of it. The password may hold characters that should have
// been percent-encoded (/ ? # @ :), which cut it into pieces that land in
// the host, the path, the query or the fragment: none of those pieces may
// be shown either. A piece counts when it looks like a secret (five bytes
// or more, with a digit and an upper-case letter, which no message of
// Parse holds) and appears nowhere else in the URL.
func FuzzParseSecret(f *testing.F) {
	f.Add(uint8(1), "user", "S3cret99", "h:1/0", false)
	f.Add(uint8(0), "user", "1/S3cret9", "h", false)
	f.Add(uint8(1), "user", "123/S3cret9", "h", false)
	f.Add(uint8(2), "", "123?S3cret9", "h:1", false)
	f.Add(uint8(3), "u", "1#S3cret9", "a:1,b:2", false)
	f.Add(uint8(4), "user", "S3c%zzret", "h/db", false)
	f.Add(uint8(4), "", "S3c%zzret9", "h/db?sslmode=disable", true)
	f.Add(uint8(6), "u", "12345678/S3cret9", "h:1", false)
	f.Add(uint8(0), "", "1?session_ttl=S3cret9", "h", true)
	f.Fuzz(func(t *testing.T, kind uint8, user, password, rest string, inQuery bool) {
		if strings.ContainsAny(user, "/?#@") || inQuery && strings.Contains(password, "&") {
			// Not a user name: the URL is cut before the password. Or
			// a password parameter with an &, which makes it two
			// parameters: no parser takes the second for a password.
			return
		}
		scheme := kinds[int(kind)%len(kinds)]
		var raw, other string
		if inQuery {
			sep := "?"
			if strings.Contains(rest, "?") {
				sep = "&"
			}
			raw = scheme + "://" + rest + sep + "password=" + password
			other = scheme + "://" + rest + sep + "password="
		} else {
			raw = scheme + "://" + user + ":" + password + "@" + rest
			other = scheme + "://" + user + ":@" + rest
		}
		secrets := secretPieces(password, other)
		if len(secrets) == 0 {
			return
		}
		shown := []string{storeurl.Redact(raw)}
		if _, err := storeurl.Parse(raw); err != nil {
			shown = append(shown, err.Error())
		}
		for _, s := range shown {
			for _, p := range secrets {
				if strings.Contains(s, p) {
					t.Fatalf("%q shows %q, a piece of the password %q of %q", s, p, password, raw)
				}
			}
		}
	})
}

// secretPieces returns the pieces of password, as written and decoded, that
// look like secrets and that other (the rest of the URL) does not hold.
func secretPieces(password, other string) []string {
	decoded := func(s string) string {
		if d, err := url.PathUnescape(s); err == nil {
			return d
		}
		return s
	}
	var out []string
	for _, form := range []string{password, decoded(password)} {
		for _, p := range strings.FieldsFunc(form, func(r rune) bool { return strings.ContainsRune("/?#@:%[],&=+ ", r) }) {
			if len(p) < 5 || !strings.ContainsFunc(p, unicode.IsDigit) || !strings.ContainsFunc(p, unicode.IsUpper) ||
				strings.Contains(other, p) || strings.Contains(decoded(other), p) {
				continue
			}
			out = append(out, p)
		}
	}
	return out
}
