package storeurl_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/internal/testenv"
	"github.com/dlmhq/dlm/storeurl"
)

// NewClient is the one call a program needs: a ready client, and the store
// to close. Two clients exclude each other; closing a store ends its dlm
// session, which releases its locks at once.
func TestNewClient(t *testing.T) {
	srv := testenv.StartDLM(t, dlmBin, "-in-memory")
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	url := "dlm://" + srv.Addr()

	locks, store, err := storeurl.NewClient(ctx, url, storeurl.WithLabel("newclient test"))
	if err != nil {
		t.Fatalf("NewClient(%s): %v", url, err)
	}
	defer store.Close(context.Background())
	if store.Kind() != storeurl.KindDLM {
		t.Errorf("store of kind %s, want dlm", store.Kind())
	}
	l, err := locks.Acquire(ctx, "orders/42", dlm.WithTTL(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}

	// Client options reach the client: a default wait of 0 makes a held
	// lock fail at once, where the default would wait for ctx.
	other, otherStore, err := storeurl.NewClient(ctx, url, storeurl.WithClientOptions(dlm.WithDefaults(dlm.WithWait(0))))
	if err != nil {
		t.Fatal(err)
	}
	defer otherStore.Close(context.Background())
	if _, err := other.Acquire(ctx, "orders/42"); !errors.Is(err, dlm.ErrNotAcquired) {
		t.Fatalf("second client while held: %v, want ErrNotAcquired", err)
	}

	// Closing the first store ends its session and frees the lock.
	if err := store.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case <-l.Lost():
	case <-ctx.Done():
		t.Fatal("the lease was not lost when its store closed")
	}
	l2, err := other.Acquire(ctx, "orders/42", dlm.WithWait(10*time.Second))
	if err != nil {
		t.Fatalf("after the holder's store closed: %v", err)
	}
	if l2.Token() <= l.Token() {
		t.Errorf("token went from %d to %d", l.Token(), l2.Token())
	}
	if err := l2.Release(ctx); err != nil {
		t.Error(err)
	}
}

// NewClient fails as Open does, with nothing to close.
func TestNewClientErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	dead := fmt.Sprintf("dlm://127.0.0.1:%d", testenv.FreePort(t))
	for url, want := range map[string]error{
		"mysql://localhost/db": storeurl.ErrBadURL,
		dead:                   dlm.ErrUnavailable,
	} {
		c, s, err := storeurl.NewClient(ctx, url)
		if !errors.Is(err, want) || c != nil || s != nil {
			t.Errorf("NewClient(%s) = %v, %v, %v; want nil, nil, %v", url, c, s, err, want)
		}
	}
}
