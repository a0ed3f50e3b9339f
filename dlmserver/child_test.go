package dlmserver_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/dlmserver"
)

// childEnv makes the test binary run as a client process that takes a lock
// and holds it until it is killed: "addr|resource|session TTL".
const childEnv = "DLM_REMOTE_TEST_CHILD"

func runChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "bad child spec", spec)
		return 2
	}
	ttl, err := time.ParseDuration(parts[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx := context.Background()
	s, err := dlmserver.Dial(ctx, parts[0], dlmserver.WithSessionTTL(ttl), dlmserver.WithLabel("child"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	l, err := dlm.New(s).Acquire(ctx, parts[1], dlm.WithTTL(time.Minute), dlm.WithAutoRenew(true))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Printf("held %d\n", l.Token())
	select {} // until killed
}

// startChild runs a client process holding resource on the server at addr,
// returns once it holds it, and kills it at the end of the test.
func startChild(t *testing.T, addr, resource string, ttl time.Duration) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s|%s|%s", childEnv, addr, resource, ttl))
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "held ") {
		t.Fatalf("child did not take the lock: %q, %v", line, err)
	}
	return cmd
}
