package locktable

// ResourcesMatching is ResourcesWithPrefix restricted further to the names
// keep accepts (nil accepts every name): one pass over the resources,
// however many names keep rejects. The server uses it to list only what a
// caller may see. Each resource is described in full; ResourcePage bounds
// the entries too.
func (t *Table) ResourcesMatching(prefix, after string, limit int, keep func(name string) bool) []ResourceInfo {
	page, _ := t.ResourcePage(ResourceQuery{Prefix: prefix, Keep: keep, After: after, MaxResources: limit})
	return page
}
