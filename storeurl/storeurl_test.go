package storeurl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dlmhq/dlm/driver"
	"github.com/dlmhq/dlm/storeurl"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		url   string
		kind  storeurl.Kind
		hosts []string
		param map[string]string
	}{
		{"", storeurl.KindDLM, []string{"127.0.0.1:7420"}, nil},
		{"dlm://a:1,b:2?session_ttl=3s&label=x", storeurl.KindDLM, []string{"a:1", "b:2"}, map[string]string{"session_ttl": "3s", "label": "x"}},
		{"dlm://node", storeurl.KindDLM, []string{"node:7420"}, nil},
		{"redis://u:p@h:7000/2?prefix=app:&dial_timeout=1s", storeurl.KindRedis, []string{"h:7000"}, map[string]string{"prefix": "app:"}},
		{"rediss://h", storeurl.KindRedis, []string{"h:6379"}, nil},
		{"redlock://a:1,b:2,c?drift=0.02", storeurl.KindRedlock, []string{"a:1", "b:2", "c:6379"}, map[string]string{"drift": "0.02"}},
		{"postgres://u:p@h/db?sslmode=disable&sequence=s", storeurl.KindPostgres, nil, map[string]string{"sequence": "s"}},
		{"postgres://h/db?sessions=0", storeurl.KindPostgres, nil, map[string]string{"sessions": "0"}},
		{"postgresql://h/db", storeurl.KindPostgres, nil, nil},
		{"etcd://[::1]:2379,e2", storeurl.KindEtcd, []string{"[::1]:2379", "e2:2379"}, nil},
		// A host of a list is read as a lone host is: the zone unescaped.
		{"etcd://[fe80::1%25eth0]:2379,e2", storeurl.KindEtcd, []string{"[fe80::1%eth0]:2379", "e2:2379"}, nil},
		{"etcd://[fe80::1%25eth0]:2379", storeurl.KindEtcd, []string{"[fe80::1%eth0]:2379"}, nil},
	} {
		spec, err := storeurl.Parse(tc.url)
		if err != nil {
			t.Errorf("Parse(%q): %v", tc.url, err)
			continue
		}
		if spec.Kind != tc.kind || strings.Join(spec.Hosts, " ") != strings.Join(tc.hosts, " ") {
			t.Errorf("Parse(%q) = %s %v, want %s %v", tc.url, spec.Kind, spec.Hosts, tc.kind, tc.hosts)
		}
		for k, v := range tc.param {
			if spec.Params[k] != v {
				t.Errorf("Parse(%q): param %s = %q, want %q", tc.url, k, spec.Params[k], v)
			}
			if spec.URL.Query().Has(k) {
				t.Errorf("Parse(%q): param %s left in the URL passed on", tc.url, k)
			}
		}
	}
	// A parameter meant for the client library stays in the URL.
	spec, _ := storeurl.Parse("redis://h/0?dial_timeout=1s&prefix=x")
	if spec.URL.Query().Get("dial_timeout") != "1s" {
		t.Errorf("dial_timeout was not passed on: %s", spec.URL)
	}
}

func TestParseRejects(t *testing.T) {
	for _, tc := range []struct{ url, want string }{
		{"mysql://h", "unknown scheme"},
		{"localhost:7420", "unknown scheme"},
		{"h:1", "unknown scheme"},
		{"//h:1", "no scheme"},
		{"dlm://", "no host"},
		{"dlm://a:1,,b:2", "empty host"},
		{"dlm://[::1,b:2", "missing ']'"},
		{"dlm://a:1,a:1", "named twice"},
		{"dlm://a:0", "port"},
		{"dlm://a:99999", "port"},
		{"dlm://h?ttl=1s", `no parameter "ttl"`},
		{"dlm://h?session_ttl=-1s", "positive duration"},
		{"dlm://h?session_ttl=1s&session_ttl=2s", "given 2 times"},
		{"dlm://u:p@h", "no user"},
		{"dlm://h/path", "no path"},
		{"etcd://h?prefix=a&x=1", `no parameter "x"`},
		{"redis://a:1,b:2", "one host"},
		{"postgres://h/db?sessions=-1", "shared sessions from 0 to 64"},
		{"postgres://h/db?sessions=65", "shared sessions from 0 to 64"},
		{"postgres://h/db?sessions=two", "shared sessions from 0 to 64"},
		{"redis:opaque", "want redis://host:port"},
		{"dlm://h:1?%zz", "query"},
		{"dlm://" + strings.Repeat("a", storeurl.MaxURLBytes), "longer than"},
		{"redlock://" + strings.Repeat("h,", storeurl.MaxHosts) + "h", "at most"},
	} {
		_, err := storeurl.Parse(tc.url)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.60q) = %v, want an error with %q", tc.url, err, tc.want)
			continue
		}
		if !errors.Is(err, storeurl.ErrBadURL) || !errors.Is(err, driver.ErrInvalid) {
			t.Errorf("Parse(%.60q): %v does not match ErrBadURL and driver.ErrInvalid", tc.url, err)
		}
	}
}

func TestErrorsHideCredentials(t *testing.T) {
	for _, u := range []string{
		"redis://user:s3cret@h:1,h2:2",
		"dlm://user:s3cret@h",
		"postgres://user:s3cret@h:99999/db",
		"ftp://user:s3cret@h",
		"redlock://user:s3cret@h:1?drift=x",
		// A password with an unencoded / ? # or a bad escape cuts the URL
		// short, and url's error quotes what follows as a port or escape.
		"redis://user:s3cret/x@h:1",
		"redis://user:s3cret?x@h:1",
		"redlock://user:s3cret#x@a:1,b:2",
		"postgres://user:s3c%zzret@h/db",
		"postgres://h/db?password=s3c%zzret",
		// A password with an unencoded / ? or # after digits: the URL
		// parses, the digits taken for a port and the rest for the path,
		// the query or the fragment.
		"dlm://user:1/s3cret@h",
		"etcd://user:12345678/s3cret@h:1",
		"redis://user:123?s3cret@h:1",
		"redlock://user:1#s3cret@a:1,b:2",
		"postgres://user:123/s3cret@h/db",
		"dlm://user:1?session_ttl=s3cret@h",
		// Not URLs: a key=value connection string, an opaque URL.
		"host=h user=u password=s3cret dbname=db",
		"redis:user:s3cret@h",
	} {
		_, err := storeurl.Parse(u)
		if err == nil {
			_, err = storeurl.Open(t.Context(), u)
		}
		if err == nil {
			t.Errorf("%s was accepted", storeurl.Redact(u))
			continue
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("the error for %s shows the password: %v", storeurl.Redact(u), err)
		}
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://u:pw@h:1/0":              "redis://u:xxxxx@h:1/0",
		"postgres://h/db?password=pw&a=b": "postgres://h/db?a=b&password=xxxxx",
		"dlm://h:1":                       "dlm://h:1",
		"redlock://u:pw@a:1,b/0":          "redlock://u:xxxxx@a:1,b/0",
		"redis://u:pw@h:1%zz":             "redis://...",
		"redis:u:pw@h":                    "redis:...",
		"host=h user=u password=pw":       "(not a URL)",
		"postgres:///db?password=pw":      "postgres:///db?password=xxxxx",
		"etcd://[fe80::1%25eth0]:1,b":     "etcd://[fe80::1%25eth0]:1,b",
		// Pieces of a password cut short by an unencoded / ? or #, or
		// hidden by a query that does not parse.
		"redis://u:123/pw@h":           "redis://...",
		"redis://u:123?pw@h":           "redis://...",
		"postgres://h/db?password=#pw": "postgres://h/db?password=xxxxx",
		"postgres://h/db?password=%0X": "postgres://...",
	} {
		if got := storeurl.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}
