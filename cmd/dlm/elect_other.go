//go:build !unix

package main

import (
	"context"
	"fmt"
	"io"
)

// runElect reports that dlm elect needs Unix process groups and signals.
func runElect(_ context.Context, _ []string, _, stderr io.Writer) int {
	fmt.Fprintln(stderr, "dlm elect: not available on this system (it needs Unix process groups and signals)")
	return exitUsage
}
