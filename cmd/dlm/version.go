package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"

	"github.com/dlmhq/dlm/internal/buildinfo"
)

const versionUsage = `Usage: dlm version [--json]
       dlm --version

Prints how this dlm was built, from the build information the Go toolchain
records: dlm's module version ("(devel)" for a build from a source tree
without version control information), the VCS revision and its time, whether
the tree had uncommitted changes ("modified"), and the Go version:

  dlm v0.1.0 (rev 1a2b3c4d5e6f, 2026-11-26T04:00:00Z) go1.26.8

--json prints the same as one JSON object, the form of the build field of a
dlm server's status (GET /v1/status):

  {"version":"v0.1.0","revision":"1a2b3c4d...","time":"2026-11-26T04:00:00Z","modified":false,"go_version":"go1.26.8"}

Flags:
`

// runVersion prints the build, in one line or as JSON.
func runVersion(args []string, stdout, stderr io.Writer) int {
	var asJSON bool
	fs := flag.NewFlagSet("dlm version", flag.ContinueOnError)
	fs.BoolVar(&asJSON, "json", false, "print JSON")
	if code, ok := parseFlags(fs, args, versionUsage, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dlm version: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	info := buildinfo.Read()
	if !asJSON {
		fmt.Fprintln(stdout, info)
		return 0
	}
	b, err := json.Marshal(info)
	if err != nil { // an Info always encodes
		fmt.Fprintf(stderr, "dlm version: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return 0
}
