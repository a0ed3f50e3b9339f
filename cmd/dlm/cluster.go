package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/server/auth"
	"github.com/dlmhq/dlm/server/cluster"
)

const clusterUsage = `Usage:
  dlm cluster members [--http ADDR] [security flags]     list the cluster's members and the leader
  dlm cluster remove [--http ADDR] [security flags] ID   remove the server ID from the cluster

--http is the HTTP address of any member, or several separated by commas
(default $DLM_HTTP_ADDR, else 127.0.0.1:7421); a member that is not the
leader names it, and the call goes there. A node joins with
"dlm server -join ADDR".

Security flags, for a server with TLS and authentication (the calls need
the admin permission):
  --ca FILE          HTTPS, verifying the members with these CAs (env DLM_CA)
  --tls              HTTPS, verifying the members with the system's CAs
  --cert, --key FILE a client certificate (env DLM_CLIENT_CERT, DLM_CLIENT_KEY)
  --token-file FILE  the bearer token, sent only over HTTPS (env DLM_TOKEN_FILE)
`

// adminFlags are the security flags of dlm cluster.
type adminFlags struct {
	ca, cert, key, tokenFile string
	tls                      bool
}

func (f *adminFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.ca, "ca", env("DLM_CA", ""), "")
	fs.BoolVar(&f.tls, "tls", false, "")
	fs.StringVar(&f.cert, "cert", env("DLM_CLIENT_CERT", ""), "")
	fs.StringVar(&f.key, "key", env("DLM_CLIENT_KEY", ""), "")
	fs.StringVar(&f.tokenFile, "token-file", env("DLM_TOKEN_FILE", ""), "")
}

// options returns the membership calls' options.
func (f *adminFlags) options() ([]cluster.Option, error) {
	var opts []cluster.Option
	if f.tls || f.ca != "" || f.cert != "" {
		c := &tls.Config{MinVersion: tls.VersionTLS12}
		if f.ca != "" {
			pool, err := auth.LoadCAPool(f.ca)
			if err != nil {
				return nil, err
			}
			c.RootCAs = pool
		}
		if (f.cert == "") != (f.key == "") {
			return nil, errors.New("--cert and --key go together")
		}
		if f.cert != "" {
			pair, err := tls.LoadX509KeyPair(f.cert, f.key)
			if err != nil {
				return nil, fmt.Errorf("--cert, --key: %w", err)
			}
			c.Certificates = []tls.Certificate{pair}
		}
		opts = append(opts, cluster.WithTLS(c))
	}
	if f.tokenFile != "" {
		if len(opts) == 0 {
			return nil, errors.New("a token is only sent over HTTPS: add --ca FILE (or --tls)")
		}
		tok, err := dlmserver.ReadTokenFile(f.tokenFile)
		if err != nil {
			return nil, err
		}
		opts = append(opts, cluster.WithToken(tok))
	}
	return opts, nil
}

func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "members" && args[0] != "remove") {
		fmt.Fprint(stderr, clusterUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return 0
		}
		return exitUsage
	}
	fs := flag.NewFlagSet("dlm cluster "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	httpAddr := fs.String("http", env("DLM_HTTP_ADDR", defaultHTTPAddr), "HTTP address of a member")
	var af adminFlags
	af.register(fs)
	if code, ok := parseFlags(fs, args[1:], clusterUsage, stderr); !ok {
		return code
	}
	opts, err := af.options()
	if err != nil {
		fmt.Fprintf(stderr, "dlm cluster %s: %s\n", args[0], userMessage(err))
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch args[0] {
	case "members":
		if fs.NArg() != 0 {
			fmt.Fprintf(stderr, "dlm cluster members: unexpected arguments %q\n", fs.Args())
			return exitUsage
		}
		return clusterMembers(ctx, *httpAddr, opts, stdout, stderr)
	default:
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "dlm cluster remove: want exactly one server ID")
			return exitUsage
		}
		if err := cluster.Remove(ctx, *httpAddr, fs.Arg(0), opts...); err != nil {
			fmt.Fprintf(stderr, "dlm cluster remove: %s\n", userMessage(err))
			return storeExit(err)
		}
		fmt.Fprintf(stdout, "removed %s\n", fs.Arg(0))
		return 0
	}
}

// clusterMembers prints the members as the first member that answers
// sees them.
func clusterMembers(ctx context.Context, addrs string, opts []cluster.Option, stdout, stderr io.Writer) int {
	list, err := cluster.Members(ctx, addrs, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "dlm cluster members: %s\n", userMessage(err))
		return storeExit(err)
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tRAFT\tCLIENTS\tHTTP\tSUFFRAGE\tROLE")
	for _, m := range list.GetMembers() {
		role := "-"
		if m.GetLeader() {
			role = "leader"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.GetId(), m.GetAddress(), dashS(m.GetClientAddress()), dashS(m.GetHttpAddress()), m.GetSuffrage(), role)
	}
	tw.Flush()
	return 0
}
