//go:build !unix

package main

import (
	"context"
	"fmt"
	"io"
)

// runRun reports that dlm run needs Unix process groups and signals.
func runRun(_ context.Context, _ []string, stderr io.Writer) int {
	fmt.Fprintln(stderr, "dlm run: not available on this system (it needs Unix process groups and signals)")
	return exitUsage
}
