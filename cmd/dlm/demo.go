package main

import (
	"context"
	"fmt"
	"io"
)

// runDemo runs `dlm demo`.
func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "dlm demo: not implemented yet")
	return 1
}
