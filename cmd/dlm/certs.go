package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/dlmhq/dlm/internal/devcert"
)

const certsUsage = `Usage:
  dlm certs [-dir DIR] [-hosts H,H...] [-nodes ID,...] [-clients NAME,...] [-server=false] [-days N] [-force]

Makes a development CA and certificates (ECDSA P-256) in -dir:
  ca.pem, ca-key.pem                 the CA (reused if -dir has one, unless -force)
  server.pem, server-key.pem         for -tls-cert/-tls-key (and Raft); valid for -hosts
  raft-ID.pem, raft-ID-key.pem       one per -nodes ID, for Raft (-raft-tls-cert/-raft-tls-key); valid for -hosts
  client-NAME.pem, client-NAME-key.pem  one per -clients NAME: a client certificate whose
                                     common name NAME is the identity the server sees
Key files get mode 0600. Existing files are not overwritten unless -force.
For development and tests: in production, use your own PKI.

Flags:
`

func runCerts(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("dlm certs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "dlm-certs", "directory to write the files to (created with mode 0700)")
	hosts := fs.String("hosts", "127.0.0.1,::1,localhost", "host names and IP addresses the server and node certificates are valid for")
	nodes := fs.String("nodes", "", "node ids to make node certificates for, comma-separated")
	clients := fs.String("clients", "", "client names (identities) to make client certificates for, comma-separated")
	withServer := fs.Bool("server", true, "make the server certificate")
	days := fs.Int("days", int(devcert.DefaultValidity/(24*time.Hour)), "validity in days (at most 3650)")
	force := fs.Bool("force", false, "overwrite existing files, and make a new CA")
	if code, ok := parseFlags(fs, args, certsUsage, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "dlm certs: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	opts := []devcert.Option{
		devcert.WithHosts(splitList(*hosts)...),
		devcert.WithNodes(splitList(*nodes)...),
		devcert.WithClients(splitList(*clients)...),
		devcert.WithValidity(time.Duration(*days) * 24 * time.Hour),
	}
	if !*withServer {
		opts = append(opts, devcert.WithoutServer())
	}
	if *force {
		opts = append(opts, devcert.WithForce())
	}
	res, err := devcert.Write(*dir, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "dlm certs: %v\n", err)
		if errors.Is(err, devcert.ErrExists) {
			return 1
		}
		return exitUsage
	}
	if res.ReusedCA {
		fmt.Fprintf(stdout, "signed with the existing CA in %s\n", *dir)
	}
	for _, f := range res.Files {
		fmt.Fprintln(stdout, "wrote", f)
	}
	return 0
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}
