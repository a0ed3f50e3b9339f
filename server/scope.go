package server

import (
	"github.com/dlmhq/dlm/locktable"
	"github.com/dlmhq/dlm/server/auth"
)

// listScope is what a caller may read of the lock table: the resources
// whose names begin with one of its list prefixes, and the sessions that
// hold or await them.
type listScope struct {
	prefixes []string // normalized (see normalizePrefixes); [""] is every name
	members  bool     // the cluster's members too (admin)
}

// scopeOf returns p's list scope.
func scopeOf(p auth.Principal) listScope {
	return listScope{prefixes: p.Prefixes(auth.PermissionList), members: p.MayAny(auth.PermissionAdmin)}
}

// all reports whether the scope covers every name.
func (sc listScope) all() bool { return len(sc.prefixes) == 1 && sc.prefixes[0] == "" }

// covers reports whether the scope covers name.
func (sc listScope) covers(name string) bool { return auth.Covers(sc.prefixes, name) }

// resources lists the resources the scope covers whose names begin with
// prefix, in name order, after after, at most limit (all if limit <= 0).
func (sc listScope) resources(t *locktable.Table, prefix, after string, limit int) []locktable.ResourceInfo {
	if sc.all() {
		return t.ResourcesWithPrefix(prefix, after, limit)
	}
	if len(sc.prefixes) == 0 {
		return nil
	}
	return t.ResourcesMatching(prefix, after, limit, sc.covers)
}

// locks returns the locks of ls on names the scope covers.
func (sc listScope) locks(ls []locktable.LockInfo) []locktable.LockInfo {
	if sc.all() {
		return ls
	}
	out := ls[:0:0]
	for _, l := range ls {
		if sc.covers(l.Resource) {
			out = append(out, l)
		}
	}
	return out
}
