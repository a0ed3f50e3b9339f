package server

import (
	"errors"
	"testing"

	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/raftnode"
)

// A rule's prefix may be as long as the longest name the server takes by
// default, and no longer.
func TestRulePrefixBoundIsTheNameBound(t *testing.T) {
	if auth.MaxRulePrefixBytes != raftnode.DefaultMaxNameLen {
		t.Fatalf("auth.MaxRulePrefixBytes = %d, raftnode.DefaultMaxNameLen = %d", auth.MaxRulePrefixBytes, raftnode.DefaultMaxNameLen)
	}
}

// Rules without authentication are a configuration error.
func TestRulesNeedAuthentication(t *testing.T) {
	if s, err := Start(Config{Node: raftnode.Config{InMemory: true}, Rules: auth.AllowAll()}); err == nil {
		s.Close()
		t.Fatal("Start took rules without tokens or client CAs")
	} else if !errors.Is(err, auth.ErrAuthConfig) {
		t.Fatalf("Start with rules only: %v", err)
	}
}
