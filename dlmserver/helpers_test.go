package dlmserver_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/api/dlmpb"
	"github.com/dlmhq/dlm/dlmserver"
	"github.com/dlmhq/dlm/internal/storetest"
	"github.com/dlmhq/dlm/internal/testenv"
)

// bin is the dlm binary the tests run; shared is the server most tests use.
var (
	bin    string
	shared *testenv.DLM
)

func TestMain(m *testing.M) {
	if child := os.Getenv(childEnv); child != "" {
		os.Exit(runChild(child))
	}
	if child := os.Getenv(deadlockChildEnv); child != "" {
		os.Exit(runDeadlockChild(child))
	}
	var cleanup func()
	var err error
	bin, cleanup, err = testenv.BuildDLM()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer cleanup()
	storetest.Main(m, &shared, func() (*testenv.DLM, error) { return testenv.NewDLM(bin) })
}

// dial opens a store on addr for the test and closes it at the end.
func dial(t testing.TB, addr string, opts ...dlmserver.Option) *dlmserver.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := dlmserver.Dial(ctx, addr, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		s.Close(ctx)
	})
	return s
}

// newClient returns a dlm client over a new store on the shared server.
func newClient(t testing.TB, opts ...dlmserver.Option) (*dlm.Client, *dlmserver.Store) {
	s := dial(t, shared.Addr(), opts...)
	return dlm.New(s), s
}

// lister reads a server's listing.
type lister struct {
	t  testing.TB
	pb dlmpb.DLMClient
}

func newLister(t testing.TB, addr string) *lister {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return &lister{t: t, pb: dlmpb.NewDLMClient(conn)}
}

// resource returns the server's description of name, nil if it has none.
func (l *lister) resource(name string) *dlmpb.ResourceInfo {
	resp, err := l.pb.List(context.Background(), &dlmpb.ListRequest{Prefix: name, Limit: 10})
	if err != nil {
		l.t.Fatal(err)
	}
	for _, r := range resp.GetResources() {
		if r.GetName() == name {
			return r
		}
	}
	return nil
}

// waiting counts the queued requests and conversions of name.
func (l *lister) waiting(name string) int {
	r := l.resource(name)
	return len(r.GetWaiting()) + len(r.GetConverting())
}

// holders counts the holders of name.
func (l *lister) holders(name string) int { return len(l.resource(name).GetHolders()) }
