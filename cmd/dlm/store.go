package main

import (
	"os"

	"github.com/dlmhq/dlm/storeurl"
)

// storeOptions are the options every command opens its store with: its
// label, and the bearer token file in $DLM_TOKEN_FILE for a dlm server
// (sent over TLS only; a dlm:// URL's own token_file takes precedence).
func storeOptions(label string, more ...storeurl.Option) []storeurl.Option {
	return append([]storeurl.Option{storeurl.WithLabel(label), storeurl.WithTokenFile(os.Getenv("DLM_TOKEN_FILE"))}, more...)
}
