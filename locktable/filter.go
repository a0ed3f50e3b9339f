package locktable

import (
	"slices"
	"strings"
)

// ResourcesMatching is ResourcesWithPrefix restricted further to the names
// keep accepts (nil accepts every name): one pass over the resources,
// however many names keep rejects. The server uses it to list only what a
// caller may see.
func (t *Table) ResourcesMatching(prefix, after string, limit int, keep func(name string) bool) []ResourceInfo {
	names := make([]string, 0, min(len(t.resources), max(limit, 0)+1))
	for name := range t.resources {
		if name > after && strings.HasPrefix(name, prefix) && (keep == nil || keep(name)) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	if limit > 0 && len(names) > limit {
		names = names[:limit]
	}
	out := make([]ResourceInfo, len(names))
	for i, name := range names {
		out[i] = t.resources[name].info()
	}
	return out
}
