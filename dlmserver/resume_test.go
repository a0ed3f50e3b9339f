package dlmserver_test

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/storetest"
)

// syncBuffer is a log destination safe for concurrent writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A program that guesses a store's session id cannot resume the session
// (issue 17 item 1): it is refused, the store keeps its stream, session and
// lock, and logs the server's warning at Warn.
func TestGuessedSessionIDIsRefusedAndLogged(t *testing.T) {
	logs := &syncBuffer{}
	c, s := newClient(t, dlmserver.WithLogger(slog.New(slog.NewTextHandler(logs, nil))))
	ctx := storetest.Context(t)
	l, err := c.Acquire(ctx, storetest.Resource(t))
	if err != nil {
		t.Fatal(err)
	}
	sid := s.Session()

	conn, err := grpc.NewClient(shared.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	st, err := dlmpb.NewDLMClient(conn).Session(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&dlmpb.SessionRequest{Msg: &dlmpb.SessionRequest_Open{Open: &dlmpb.OpenRequest{Session: sid}}}); err != nil {
		t.Fatal(err)
	}
	if m, err := st.Recv(); status.Code(err) != codes.PermissionDenied {
		t.Fatalf("resume of the store's session %d without its token: %v, %v; want PermissionDenied", sid, m, err)
	}
	storetest.Await(t, 10*time.Second, "the store logs the warning", func() bool {
		return strings.Contains(logs.String(), "level=WARN") && strings.Contains(logs.String(), "REASON_BAD_RESUME_TOKEN")
	})
	if err := l.Release(ctx); err != nil {
		t.Fatalf("release after the attempt: %v", err)
	}
	if got := s.Session(); got != sid {
		t.Fatalf("the store's session is %d after the attempt, want %d", got, sid)
	}
}
