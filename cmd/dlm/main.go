// Command dlm is the dlm lock server and its tools.
//
//	dlm server [flags]   run a dlm server (see dlm server -h)
//	dlm version          print the version
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `dlm is a distributed lock manager.

Usage:
  dlm server [flags]   run a dlm server (dlm server -h for its flags)
  dlm version          print the version
`

// run runs one subcommand and returns the process exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "server":
		return runServer(ctx, args[1:], stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "dlm", version)
		return 0
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "dlm: unknown command %q\n\n%s", args[0], usage)
	return 2
}
