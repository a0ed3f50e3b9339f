package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlmhq/dlm/server"
)

const clusterUsage = `Usage:
  dlm cluster members [--http ADDR]     list the cluster's members and the leader
  dlm cluster remove [--http ADDR] ID   remove the server ID from the cluster

--http is the HTTP address of any member, or several separated by commas
(default $DLM_HTTP_ADDR, else 127.0.0.1:7421); a member that is not the
leader names it, and the call goes there. A node joins with
"dlm server -join ADDR".
`

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
	fs.Usage = func() { fmt.Fprint(stderr, clusterUsage) }
	httpAddr := fs.String("http", env("DLM_HTTP_ADDR", defaultHTTPAddr), "HTTP address of a member")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
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
		return clusterMembers(ctx, *httpAddr, stdout, stderr)
	default:
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "dlm cluster remove: want exactly one server ID")
			return exitUsage
		}
		if err := server.RemoveMember(ctx, *httpAddr, fs.Arg(0)); err != nil {
			fmt.Fprintf(stderr, "dlm cluster remove: %v\n", err)
			return exitUnavailable
		}
		fmt.Fprintf(stdout, "removed %s\n", fs.Arg(0))
		return 0
	}
}

// clusterMembers prints /v1/members of the first member that answers.
func clusterMembers(ctx context.Context, addrs string, stdout, stderr io.Writer) int {
	var last error
	for _, addr := range strings.Split(addrs, ",") {
		var reply struct {
			Members []server.Member `json:"members"`
		}
		if last = getJSON(ctx, "http://"+strings.TrimSpace(addr)+"/v1/members", &reply); last != nil {
			continue
		}
		tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tRAFT\tCLIENTS\tHTTP\tSUFFRAGE\tROLE")
		for _, m := range reply.Members {
			role := "-"
			if m.Leader {
				role = "leader"
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", m.ID, m.Address, dashS(m.Client), dashS(m.HTTP), m.Suffrage, role)
		}
		tw.Flush()
		return 0
	}
	fmt.Fprintf(stderr, "dlm cluster members: %v\n", last)
	return exitUnavailable
}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(v)
}
