package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dlmhq/dlm/server/cluster"
	"github.com/dlmhq/dlm/server/raftnode"
)

const snapshotUsage = `Usage:
  dlm snapshot save FILE [--http ADDR] [security flags]   save an online copy of a server's state
  dlm snapshot restore FILE [--data DIR]                  prepare a fresh data dir to start from FILE

save asks a running member (--http: its HTTP address, or several separated
by commas; default $DLM_HTTP_ADDR, else 127.0.0.1:7421) for a copy of the
replicated state as of the last entry it applied (name the leader for the
newest), checks it and writes it to FILE. No node stops.

restore checks FILE and places it in DIR (default $DLM_DATA, else
./dlm-data), which must be new or empty: "dlm server -data DIR" then starts
from it, as a cluster of its own (or of -peers). Its first leader raises
the fencing tokens above every token the saved cluster can have issued
since (see docs/operations.md, Backups); -token-floor N makes sure of N.

Security flags of save, for a server with TLS and authentication (the call
needs the admin permission):
  --ca FILE          HTTPS, verifying the members with these CAs (env DLM_CA)
  --tls              HTTPS, verifying the members with the system's CAs
  --cert, --key FILE a client certificate (env DLM_CLIENT_CERT, DLM_CLIENT_KEY)
  --token-file FILE  the bearer token, sent only over HTTPS (env DLM_TOKEN_FILE)
`

func runSnapshot(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || (args[0] != "save" && args[0] != "restore") {
		fmt.Fprint(stderr, snapshotUsage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
			return 0
		}
		return exitUsage
	}
	name := "dlm snapshot " + args[0]
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	var httpAddr, dataDir *string
	var af adminFlags
	if args[0] == "save" {
		httpAddr = fs.String("http", env("DLM_HTTP_ADDR", defaultHTTPAddr), "HTTP address of a member")
		af.register(fs)
	} else {
		dataDir = fs.String("data", env("DLM_DATA", defaultDataDir), "the data directory to prepare")
	}
	// Flags may come before or after FILE.
	var files []string
	rest := args[1:]
	for {
		if code, ok := parseFlags(fs, rest, snapshotUsage, stderr); !ok {
			return code
		}
		if fs.NArg() == 0 {
			break
		}
		files = append(files, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	if len(files) != 1 {
		fmt.Fprintf(stderr, "%s: want exactly one FILE (see %s -h)\n", name, name)
		return exitUsage
	}
	if args[0] == "restore" {
		return snapshotRestore(files[0], *dataDir, stdout, stderr)
	}
	opts, err := af.options()
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, userMessage(err))
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	snap, err := cluster.Snapshot(ctx, *httpAddr, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, userMessage(err))
		return storeExit(err)
	}
	if err := writeFileAtomic(files[0], snap); err != nil {
		fmt.Fprintf(stderr, "%s: %s\n", name, userMessage(err))
		return 1
	}
	fmt.Fprintf(stdout, "saved the state as of entry %d to %s (%d bytes)\n", snap.Index, files[0], snap.Size())
	return 0
}

// snapshotRestore places the snapshot file in a fresh data dir.
func snapshotRestore(file, dir string, stdout, stderr io.Writer) int {
	snap, err := raftnode.PrepareRestore(file, dir)
	if err != nil {
		fmt.Fprintf(stderr, "dlm snapshot restore: %s\n", userMessage(err))
		if errors.Is(err, raftnode.ErrBadSnapshotFile) || errors.Is(err, raftnode.ErrDataDirNotEmpty) {
			return exitUsage
		}
		return 1
	}
	fmt.Fprintf(stdout, "%s holds the state as of entry %d: start \"dlm server -data %s\"\n", dir, snap.Index, dir)
	return 0
}

// writeFileAtomic writes snap to path through a temporary file in the same
// directory, synced and renamed: path is whole or untouched.
func writeFileAtomic(path string, snap raftnode.SnapshotFile) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	_, err = snap.WriteTo(tmp)
	err = errors.Join(err, tmp.Sync(), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
