package etcd

import (
	"bytes"
	"strconv"
	"strings"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm/driver"
)

// escaper makes a resource name safe as one path segment.
var escaper = strings.NewReplacer("%", "%25", "/", "%2F")

// dir returns the common prefix of the keys of resource.
func (s *Store) dir(resource string) string {
	return s.prefix + escaper.Replace(resource) + "/"
}

// slotKey returns the key of slot n of the session with lease id in the
// directory dir of a resource (see Store.dir): dir, then the lease in hex,
// a dash and n (why keys are reused: the package documentation; how:
// slotSet).
func slotKey(dir string, lease clientv3.LeaseID, n int) string {
	return dir + strconv.FormatInt(int64(lease), 16) + "-" + strconv.Itoa(n)
}

// value is what the key of req holds: the mode's name, a space, the owner,
// a newline, and the metadata.
func value(req driver.Request) string {
	return req.Mode.String() + " " + req.Owner + "\n" + req.Metadata
}

// parseValue splits a key's value into its mode's name, owner and
// metadata. The owner of a value without one (written by an older version
// of the store, whose keys ended in the owner) is the key's last segment.
func parseValue(kv *mvccpb.KeyValue) (mode, owner, metadata string) {
	head, metadata, _ := strings.Cut(string(kv.Value), "\n")
	mode, owner, ok := strings.Cut(head, " ")
	if !ok {
		owner = string(kv.Key[bytes.LastIndexByte(kv.Key, '/')+1:])
	}
	return mode, owner, metadata
}

// modeOf returns the mode recorded in a key's value. A value this store did
// not write counts as EX, which conflicts with every mode but NL.
func modeOf(kv *mvccpb.KeyValue) driver.Mode {
	name, _, _ := parseValue(kv)
	m, err := driver.ParseMode(name)
	if err != nil {
		return driver.EX
	}
	return m
}
