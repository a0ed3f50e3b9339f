package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/testenv"
)

// sessionList runs dlm session ls --json with args and returns its sessions
// and the owner's usage.
func sessionList(t *testing.T, env []string, args ...string) ([]sessionJSON, *ownerUsage) {
	t.Helper()
	code, out, stderr := runDLM(t, env, append([]string{"session", "ls", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("dlm session ls: exit %d; stderr:\n%s", code, stderr)
	}
	var got struct {
		Sessions []sessionJSON `json:"sessions"`
		Usage    *ownerUsage   `json:"usage"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("dlm session ls --json: %v\n%s", err, out)
	}
	return got.Sessions, got.Usage
}

// dialOpen opens a session on an open-mode server, labelled label.
func dialOpen(t *testing.T, addr, label string) *dlmserver.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	s, err := dlmserver.Dial(ctx, addr, dlmserver.WithLabel(label))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// sessionListed returns the sessions dlm session ls lists.
func sessionListed(t *testing.T, store string) []sessionJSON {
	t.Helper()
	got, _ := sessionList(t, nil, store)
	return got
}

func TestSessionLsAndKill(t *testing.T) {
	d := testenv.StartDLM(t, dlmBin(t), "-in-memory")
	store := storeFlag(d.Addr())
	one, _ := dialOpen(t, d.Addr(), "job-one"), dialOpen(t, d.Addr(), "job-two")

	got, _ := sessionList(t, nil, store)
	if len(got) != 2 || got[0].ID != one.Session() || got[0].Label != "job-one" || got[1].Label != "job-two" || got[0].TTL == "" || got[0].ExpiresIn == "" {
		t.Fatalf("dlm session ls: %+v", got)
	}
	if page, _ := sessionList(t, nil, store, "--limit", "1"); len(page) != 1 {
		t.Fatalf("--limit 1: %+v", page)
	}
	code, out, stderr := runDLM(t, nil, "session", "ls", store)
	if code != 0 || !strings.Contains(out, "job-two") || !strings.Contains(out, "EXPIRES IN") {
		t.Fatalf("dlm session ls: exit %d\n%s%s", code, out, stderr)
	}

	// (The client of a killed session opens a new one: kill ends sessions,
	// not clients.)
	killed := one.Session()
	code, out, stderr = runDLM(t, nil, "session", "kill", store, fmt.Sprint(killed), "999999")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("ended 1 sessions: %d", killed)) {
		t.Fatalf("dlm session kill: exit %d\n%s%s", code, out, stderr)
	}
	for _, s := range sessionListed(t, store) {
		if s.ID == killed {
			t.Fatalf("session %d listed after the kill", killed)
		}
	}

	for _, args := range [][]string{
		{"session"},
		{"session", "rm"},
		{"session", "kill", store},
		{"session", "kill", store, "x1"},
		{"session", "kill", store, "0"},
		{"session", "kill", store, "5", "--owner", "alice"},
		{"session", "ls", store, "extra"},
		{"session", "ls", store, "--limit", "0"},
		{"session", "ls", "--store=redis://127.0.0.1:1"},
	} {
		if code, _, stderr := runDLM(t, nil, args...); code != exitUsage || stderr == "" {
			t.Errorf("dlm %v: exit %d, want %d with a message; stderr:\n%s", args, code, exitUsage, stderr)
		}
	}
}

// openAndLeave opens a one-hour session with token over TLS, as a raw
// client, and leaves it open without a stream.
func openAndLeave(t *testing.T, addr, caFile, token string) error {
	t.Helper()
	pool := x509.NewCertPool()
	pem, err := os.ReadFile(caFile)
	if err != nil || !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("CA %s: %v", caFile, err)
	}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12})),
		grpc.WithPerRPCCredentials(bearerToken(token)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	st, err := dlmpb.NewDLMClient(conn).Session(ctx)
	if err != nil {
		return err
	}
	if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(time.Hour), Label: "flood"}}}); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	m, err := st.Recv()
	if err != nil {
		return err
	}
	if m.GetOpened() == nil {
		t.Fatalf("want SessionOpened, got %v", m)
	}
	return nil
}

// On a secured server: the session quota set by flag stops alice's flood;
// only the admin lists and ends her sessions, after which she has room.
func TestSessionCommandsNeedAdmin(t *testing.T) {
	f := newSecureFiles(t)
	d := testenv.StartDLM(t, dlmBin(t), append(f.serverFlags("node-1"), "-max-sessions-per-identity", "2")...)
	store := "--store=dlms://" + d.Addr() + "?ca=" + f.path("ca.pem")
	as := func(id string) []string { return []string{"DLM_TOKEN_FILE=" + f.tokenFile[id]} }

	// alice's flood: one-hour sessions left behind by a raw client.
	for range 2 {
		if err := openAndLeave(t, d.Addr(), f.path("ca.pem"), f.token["alice"]); err != nil {
			t.Fatal(err)
		}
	}
	if err := openAndLeave(t, d.Addr(), f.path("ca.pem"), f.token["alice"]); status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "quota") {
		t.Fatalf("alice's third session: %v, want ResourceExhausted naming the quota", err)
	}
	if code, _, stderr := runDLM(t, as("alice"), "run", store, "--lock", "a/x", "--", "true"); code == 0 || !strings.Contains(stderr, "quota") {
		t.Fatalf("dlm run as alice: exit %d, want a refusal naming the quota; stderr:\n%s", code, stderr)
	}

	for _, id := range []string{"alice", "bob"} {
		if code, _, stderr := runDLM(t, as(id), "session", "ls", store, "--owner", "alice"); code != exitDenied {
			t.Fatalf("%s: dlm session ls: exit %d, want %d; stderr:\n%s", id, code, exitDenied, stderr)
		}
		if code, _, stderr := runDLM(t, as(id), "session", "kill", store, "--owner", "alice"); code != exitDenied {
			t.Fatalf("%s: dlm session kill: exit %d, want %d; stderr:\n%s", id, code, exitDenied, stderr)
		}
	}
	got, use := sessionList(t, as("ops"), store, "--owner", "alice")
	if len(got) != 2 || got[0].Owner != "alice" || use == nil || use.Sessions != 2 || use.SessionQuota != 2 {
		t.Fatalf("ops lists alice's sessions: %+v, usage %+v", got, use)
	}
	code, out, stderr := runDLM(t, as("ops"), "session", "ls", store, "--owner", "alice")
	if code != 0 || !strings.Contains(out, "alice: 2 of 2 sessions") {
		t.Fatalf("dlm session ls --owner alice: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runDLM(t, as("ops"), "session", "kill", store, "--owner", "alice")
	if code != 0 || !strings.Contains(out, "ended 2 sessions") {
		t.Fatalf("dlm session kill --owner alice: exit %d\n%s%s", code, out, stderr)
	}
	if code, _, stderr := runDLM(t, as("alice"), "run", store, "--lock", "a/x", "--", "true"); code != 0 {
		t.Fatalf("alice after the kill: exit %d; stderr:\n%s", code, stderr)
	}
}

func TestServerQuotaFlagsAreChecked(t *testing.T) {
	for _, flag := range []string{"-max-sessions-per-identity", "-max-locks-per-identity", "-max-event-streams-per-identity"} {
		code, _, stderr := runDLM(t, nil, "server", "-in-memory", flag, "0")
		if code != exitUsage || !strings.Contains(stderr, flag+" 0") {
			t.Errorf("dlm server %s 0: exit %d, want %d naming the flag; stderr:\n%s", flag, code, exitUsage, stderr)
		}
	}
}
