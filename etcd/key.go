package etcd

import (
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/dlmhq/dlm/driver"
)

// escaper makes a resource name safe as one path segment.
var escaper = strings.NewReplacer("%", "%25", "/", "%2F")

// dir returns the common prefix of the keys of resource.
func (s *Store) dir(resource string) string {
	return s.prefix + escaper.Replace(resource) + "/"
}

// key returns the key of owner's request on resource.
func (s *Store) key(resource, owner string) string {
	return s.dir(resource) + owner
}

// value is what the key of req holds: the mode's name, a newline, and the
// metadata.
func value(req driver.Request) string {
	return req.Mode.String() + "\n" + req.Metadata
}

// modeOf returns the mode recorded in a key's value. A value this store did
// not write counts as EX, which conflicts with every mode but NL.
func modeOf(kv *mvccpb.KeyValue) driver.Mode {
	name, _, _ := strings.Cut(string(kv.Value), "\n")
	m, err := driver.ParseMode(name)
	if err != nil {
		return driver.EX
	}
	return m
}
