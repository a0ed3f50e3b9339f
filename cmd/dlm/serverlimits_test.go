package main

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/dlmhq/dlm/api/dlmpb"
)

// TestServerLimitFlagsRefuseBadValues: a limit that is not a positive
// number is a usage error naming the flag and the value.
func TestServerLimitFlagsRefuseBadValues(t *testing.T) {
	for _, args := range [][]string{
		{"-max-locks", "0"}, {"-max-locks-per-resource", "-5"}, {"-max-sessions", "0"},
		{"-max-locks-per-session", "-1"}, {"-max-waiters-per-resource", "0"}, {"-max-locks", "many"},
	} {
		var out, errb bytes.Buffer
		if code := run(t.Context(), append([]string{"server", "-in-memory"}, args...), &out, &errb); code != 2 {
			t.Fatalf("%q: exit %d, want 2; stderr:\n%s", args, code, errb.String())
		}
		if !strings.Contains(errb.String(), args[0]) || !strings.Contains(errb.String(), args[1]) {
			t.Fatalf("%q: message does not name the flag and value:\n%s", args, errb.String())
		}
	}
}

// TestServerLimitFlagsApply: the caps on locks per resource and per server
// given as flags are those the server enforces.
func TestServerLimitFlagsApply(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var errb syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"server", "-in-memory", "-addr", "127.0.0.1:0", "-http", "", "-raft-addr", "127.0.0.1:0",
			"-raft-timeout", "50ms", "-data", t.TempDir(), "-max-locks-per-resource", "2", "-max-locks", "3"}, &errb, &errb)
	}()
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("exit %d:\n%s", code, errb.String())
		}
	}()
	addrRE := regexp.MustCompile(`server: started" addr=(127\.0\.0\.1:\d+)`)
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(errb.String(), "serving as leader") || addrRE.FindStringSubmatch(errb.String()) == nil {
		if time.Now().After(deadline) {
			t.Fatalf("not serving after 20s:\n%s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	conn, err := grpc.NewClient(addrRE.FindStringSubmatch(errb.String())[1], grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	defer scancel()
	st, err := dlmpb.NewDLMClient(conn).Session(sctx)
	if err != nil {
		t.Fatal(err)
	}
	recv := func() *dlmpb.SessionResponse {
		for {
			m, err := st.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if m.GetKeepAliveAck() == nil && m.GetSync() == nil {
				return m
			}
		}
	}
	if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Ttl: durationpb.New(time.Minute)}}}); err != nil {
		t.Fatal(err)
	}
	sid := recv().GetOpened().GetSession()
	for i, want := range []struct {
		resource string
		reason   dlmpb.Reason
	}{{"r", 0}, {"r", 0}, {"r", dlmpb.Reason_REASON_TOO_MANY_HOLDERS}, {"s", 0}, {"t", dlmpb.Reason_REASON_TOO_MANY_LOCKS}} {
		seq := uint64(i + 1)
		if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Lock{Lock: &dlmpb.LockRequest{
			Id: &dlmpb.RequestID{Session: sid, Seq: seq}, Owner: seq, Resource: want.resource, Mode: dlmpb.Mode_MODE_NL}}}); err != nil {
			t.Fatal(err)
		}
		m := recv()
		if got := m.GetRefused().GetReason(); got != want.reason || (want.reason == 0 && m.GetGranted() == nil) {
			t.Fatalf("lock %d on %q: %v, want reason %v", seq, want.resource, m, want.reason)
		}
	}
}
