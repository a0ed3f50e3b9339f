// Command dlm is the dlm lock server and its tools.
//
//	dlm server [flags]                   run a dlm server
//	dlm run --lock NAME [flags] -- cmd   run a command while holding a lock
//	dlm elect [flags] NAME VALUE -- cmd  run a command while leading an election
//	dlm ls [flags]                       list locks, holders and waiters
//	dlm status [flags]                   describe the store
//	dlm bench [flags]                    measure a store with the standard workloads
//	dlm cluster members|remove ID        a dlm server cluster's membership
//	dlm session ls|kill                  a dlm server's sessions (admin)
//	dlm snapshot save|restore FILE       an online copy of a dlm server's state (admin)
//	dlm certs [flags]                    make a development CA and certificates
//	dlm demo [flags]                     the inventory story, end to end
//	dlm version [--json]                 print the version and build
//	dlm --version                        the same as dlm version
//
// Each command takes -h for its flags.
package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"syscall"
)

func main() {
	ctx, stop := notifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	quietRedis(slog.Default())
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

const usage = `dlm is a distributed lock manager.

Usage:
  dlm server [flags]                   run a dlm server
  dlm run --lock NAME [flags] -- cmd   run a command while holding a lock
  dlm elect [flags] NAME VALUE -- cmd  run a command while leading an election
                                       (--observe NAME: follow who leads)
  dlm ls [flags]                       list locks, holders and waiters
  dlm status [flags]                   describe the store and its health
  dlm bench [flags]                    measure a store with the standard workloads
  dlm cluster members|remove ID        a dlm server cluster's membership
  dlm session ls|kill                  list or end a dlm server's sessions (admin)
  dlm snapshot save|restore FILE       save an online copy of a dlm server's state (admin),
                                       or prepare a fresh data dir to start from one
  dlm certs [flags]                    make a development CA and certificates (TLS)
  dlm demo [flags]                     the inventory story, end to end, with no setup
  dlm version [--json]                 print the version, revision and Go version
                                       (also dlm --version)

Each command takes -h for its flags. Commands that use a store take
--store URL (default $DLM_STORE, else dlm://127.0.0.1:7420; dlms:// for TLS),
and send the token in $DLM_TOKEN_FILE to a dlm server over TLS.
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
	case "run":
		// dlm run handles its own signals: it passes them to the command.
		return runRun(context.WithoutCancel(ctx), args[1:], stderr)
	case "elect":
		return runElect(ctx, args[1:], stdout, stderr)
	case "ls":
		return runLs(ctx, args[1:], stdout, stderr)
	case "status":
		return runStatus(ctx, args[1:], stdout, stderr)
	case "bench":
		return runBench(ctx, args[1:], stdout, stderr)
	case "cluster":
		return runCluster(ctx, args[1:], stdout, stderr)
	case "session":
		return runSession(ctx, args[1:], stdout, stderr)
	case "snapshot":
		return runSnapshot(ctx, args[1:], stdout, stderr)
	case "certs":
		return runCerts(args[1:], stdout, stderr)
	case "demo":
		return runDemo(ctx, args[1:], stdout, stderr)
	case "version", "--version", "-version":
		return runVersion(args[1:], stdout, stderr)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	}
	fmt.Fprintf(stderr, "dlm: unknown command %q\n\n%s", args[0], usage)
	return 2
}
