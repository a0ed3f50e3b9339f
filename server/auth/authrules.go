package auth

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
)

// MaxRules bounds the rules of a rules file.
const MaxRules = 10000

// MaxRulePrefixBytes bounds a rule's name prefix: the server's default
// longest name (raftnode.DefaultMaxNameLen), so that no longer prefix could
// match a name.
const MaxRulePrefixBytes = 512

// Permission is a right that a rule grants an identity.
type Permission uint8

// The permissions.
const (
	// PermissionLock allows acquiring, converting, releasing and
	// cancelling locks whose names begin with the rule's prefix.
	PermissionLock Permission = iota + 1
	// PermissionList allows reading the resources whose names begin with
	// the rule's prefix, and the sessions holding or awaiting them (List,
	// /v1/resources, /v1/sessions, /v1/events, the dashboard); with any
	// prefix it also allows the node-wide reads: Status, /v1/status and
	// /metrics.
	PermissionList
	// PermissionAdmin allows the cluster's membership: joining, removing
	// and listing members. Its prefix is always "*".
	PermissionAdmin
)

// String returns "lock", "list" or "admin".
func (p Permission) String() string {
	switch p {
	case PermissionLock:
		return "lock"
	case PermissionList:
		return "list"
	case PermissionAdmin:
		return "admin"
	}
	return "Permission(" + strconv.Itoa(int(p)) + ")"
}

// ParsePermission parses "lock", "list" or "admin".
func ParsePermission(s string) (Permission, error) {
	for _, p := range []Permission{PermissionLock, PermissionList, PermissionAdmin} {
		if s == p.String() {
			return p, nil
		}
	}
	return 0, fmt.Errorf("unknown permission %q (want lock, list or admin)", s)
}

// AnyIdentity in a rule stands for every authenticated identity.
const AnyIdentity = "*"

// Rule grants Identity (or AnyIdentity) Permission on the names that begin
// with Prefix ("" for every name).
type Rule struct {
	Identity   string
	Permission Permission
	Prefix     string
}

// Rules decide what authenticated identities may do. Rules only grant: an
// identity has the union of its own rules and those of AnyIdentity, and
// nothing else.
//
// A rules file has one "identity permission prefix" rule per line, fields
// separated by spaces or tabs; blank lines and lines whose first non-blank
// character is '#' are ignored. The identity is as in a token file, or "*"
// for any authenticated identity. The permission is lock, list or admin.
// The prefix is "*" for every name, a word without spaces, or a Go string
// literal in double quotes ("jobs/nightly run/") for a prefix with spaces,
// a leading '*', or the empty prefix; admin takes "*" only. At most
// MaxRules rules, MaxAuthFileBytes bytes, prefixes of at most
// MaxRulePrefixBytes.
//
//	# identity  permission  prefix
//	alice       lock        jobs/
//	alice       list        jobs/
//	*           list        *
//	ops         admin       *
type Rules struct {
	byIdentity map[string]*grants
	any        grants
}

// grants are one identity's permissions: normalized prefix lists (sorted,
// none a prefix of another; [""] is every name).
type grants struct {
	lock, list []string
	admin      bool
}

// AllowAll returns rules that grant every authenticated identity every
// permission on every name: authentication without authorization.
func AllowAll() *Rules {
	r, _ := NewRules(Rule{AnyIdentity, PermissionLock, ""}, Rule{AnyIdentity, PermissionList, ""}, Rule{AnyIdentity, PermissionAdmin, ""})
	return r
}

// NewRules makes Rules from rules.
func NewRules(rules ...Rule) (*Rules, error) {
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("%w: more than %d rules", ErrAuthConfig, MaxRules)
	}
	r := &Rules{byIdentity: map[string]*grants{}}
	for i, rule := range rules {
		if err := r.add(rule); err != nil {
			return nil, fmt.Errorf("%w: rule %d: %w", ErrAuthConfig, i+1, err)
		}
	}
	r.finish()
	return r, nil
}

// LoadRules reads a rules file (see Rules).
func LoadRules(path string) (*Rules, error) {
	data, err := readLimited(path, MaxAuthFileBytes)
	if err != nil {
		return nil, fmt.Errorf("%w: rules file: %w", ErrAuthConfig, err)
	}
	r, err := ParseRules(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// ParseRules reads rules in the rules file format (see Rules).
func ParseRules(rd io.Reader) (*Rules, error) {
	r := &Rules{byIdentity: map[string]*grants{}}
	sc := bufio.NewScanner(io.LimitReader(rd, MaxAuthFileBytes+1))
	sc.Buffer(make([]byte, 0, 4096), MaxAuthFileBytes+1)
	count, read := 0, 0
	for n := 1; sc.Scan(); n++ {
		read += len(sc.Bytes()) + 1
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		rule, err := parseRule(line)
		if err == nil {
			err = r.add(rule)
		}
		if err != nil {
			return nil, fmt.Errorf("%w: rules file line %d: %w", ErrAuthConfig, n, err)
		}
		if count++; count > MaxRules {
			return nil, fmt.Errorf("%w: rules file: more than %d rules", ErrAuthConfig, MaxRules)
		}
	}
	if err := sc.Err(); err != nil || read > MaxAuthFileBytes {
		return nil, fmt.Errorf("%w: rules file: larger than %d bytes, or a line too long", ErrAuthConfig, MaxAuthFileBytes)
	}
	r.finish()
	return r, nil
}

// parseRule parses one "identity permission prefix" line.
func parseRule(line string) (Rule, error) {
	id, rest := cutField(line)
	permWord, prefix := cutField(rest)
	if permWord == "" || prefix == "" {
		return Rule{}, fmt.Errorf(`want "identity permission prefix" (prefix "*" for every name)`)
	}
	perm, err := ParsePermission(permWord)
	if err != nil {
		return Rule{}, err
	}
	switch {
	case prefix == "*":
		prefix = ""
	case strings.HasPrefix(prefix, `"`):
		if prefix, err = strconv.Unquote(prefix); err != nil {
			return Rule{}, fmt.Errorf("prefix: a quoted prefix must be one Go string literal: %w", err)
		}
	case strings.ContainsAny(prefix, " \t"):
		return Rule{}, fmt.Errorf(`prefix %q: quote a prefix with spaces ("...")`, prefix)
	}
	return Rule{Identity: id, Permission: perm, Prefix: prefix}, nil
}

// cutField cuts s at its first run of spaces or tabs.
func cutField(s string) (field, rest string) {
	i := strings.IndexAny(s, " \t")
	if i < 0 {
		return s, ""
	}
	return s[:i], strings.TrimSpace(s[i:])
}

// add checks and adds one rule.
func (r *Rules) add(rule Rule) error {
	if rule.Identity != AnyIdentity {
		if err := checkIdentity(rule.Identity); err != nil {
			return err
		}
	}
	if len(rule.Prefix) > MaxRulePrefixBytes {
		return fmt.Errorf("prefix longer than %d bytes", MaxRulePrefixBytes)
	}
	g := &r.any
	if rule.Identity != AnyIdentity {
		if g = r.byIdentity[rule.Identity]; g == nil {
			g = &grants{}
			r.byIdentity[rule.Identity] = g
		}
	}
	switch rule.Permission {
	case PermissionLock:
		g.lock = append(g.lock, rule.Prefix)
	case PermissionList:
		g.list = append(g.list, rule.Prefix)
	case PermissionAdmin:
		if rule.Prefix != "" {
			return fmt.Errorf(`admin is cluster-wide: its prefix is "*", not %q`, rule.Prefix)
		}
		g.admin = true
	default:
		return fmt.Errorf("unknown permission %d", rule.Permission)
	}
	return nil
}

// finish merges AnyIdentity's grants into every identity's and normalizes
// the prefix lists.
func (r *Rules) finish() {
	r.any.lock, r.any.list = normalizePrefixes(r.any.lock), normalizePrefixes(r.any.list)
	for _, g := range r.byIdentity {
		g.lock = normalizePrefixes(append(g.lock, r.any.lock...))
		g.list = normalizePrefixes(append(g.list, r.any.list...))
		g.admin = g.admin || r.any.admin
	}
}

// normalizePrefixes sorts prefixes and drops those that another one
// covers. The result's prefixes cover disjoint name ranges, in name order.
func normalizePrefixes(ps []string) []string {
	slices.Sort(ps)
	out := ps[:0]
	for _, p := range ps {
		if len(out) > 0 && strings.HasPrefix(p, out[len(out)-1]) {
			continue // covered by the shorter one before it (sorted)
		}
		out = append(out, p)
	}
	return slices.Clip(out)
}

// grantsOf returns identity's grants.
func (r *Rules) grantsOf(identity string) *grants {
	if g := r.byIdentity[identity]; g != nil {
		return g
	}
	return &r.any
}

// Allows reports whether identity has permission p on name (for admin,
// name is ignored).
func (r *Rules) Allows(identity string, p Permission, name string) bool {
	g := r.grantsOf(identity)
	switch p {
	case PermissionAdmin:
		return g.admin
	case PermissionLock:
		return Covers(g.lock, name)
	case PermissionList:
		return Covers(g.list, name)
	}
	return false
}

// Prefixes returns the name prefixes on which identity has permission p
// (lock or list): sorted, none a prefix of another; [""] means every name;
// empty, none.
func (r *Rules) Prefixes(identity string, p Permission) []string {
	g := r.grantsOf(identity)
	switch p {
	case PermissionLock:
		return slices.Clone(g.lock)
	case PermissionList:
		return slices.Clone(g.list)
	}
	return nil
}

// Covers reports whether name begins with one of prefixes.
func Covers(prefixes []string, name string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
