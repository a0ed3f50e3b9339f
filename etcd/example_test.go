package etcd_test

import (
	"context"
	"fmt"
	"log"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/dlmhq/dlm"
	"github.com/dlmhq/dlm/etcd"
)

// A shared (PR) lock: readers hold it together; a writer (EX) queued
// before a reader goes first.
func Example() {
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{"127.0.0.1:2379"},
		DialTimeout: 5 * time.Second,
	})
	if err != nil {
		log.Fatal(err)
	}
	defer cli.Close()
	locks := dlm.New(etcd.New(cli))

	err = locks.Do(context.Background(), "catalog", func(ctx context.Context, l *dlm.Lease) error {
		// The token is the key's create revision in etcd: pass it to
		// whatever you write, so that it can refuse a stale holder.
		fmt.Println("reading with token", l.Token())
		return nil
	}, dlm.WithMode(dlm.PR), dlm.WithTTL(10*time.Second), dlm.WithWait(5*time.Second))
	if err != nil {
		log.Print(err)
	}
}
