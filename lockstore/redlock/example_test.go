package redlock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/redlock"
)

// Redlock over five independent Redis masters: a lease survives two of them
// dying. The fence goes with every write to the protected resource.
func ExampleOpenRedlock() {
	store, err := redlock.Open([]string{
		"redis://redis-1:6379/0", "redis://redis-2:6379/0", "redis://redis-3:6379/0",
		"redis://redis-4:6379/0", "redis://redis-5:6379/0",
	}, redlock.Options{NodeTimeout: 50 * time.Millisecond, MaxTTL: 24 * time.Hour})
	if err != nil {
		log.Fatal(err) // fewer than 3 nodes, a duplicate, a bad URL
	}
	defer store.Close()

	ctx := context.Background()
	lease, err := store.Acquire(ctx, "jobs/nightly", lockstore.AcquireRequest{
		Token: lockstore.NewToken(), TTL: 30 * time.Second, Owner: "worker-7",
	})
	var quorum *lockstore.QuorumError
	switch {
	case errors.Is(err, lockstore.ErrHeld):
		return // someone else runs it
	case errors.As(err, &quorum):
		log.Printf("only %d of %d nodes answered", quorum.Nodes-quorum.Failed, quorum.Nodes)
		return
	case err != nil:
		log.Fatal(err)
	}
	defer store.Release(ctx, "jobs/nightly", lease.Token)
	fmt.Println("write with fence", lease.Fence, "until", lease.ExpiresAt)
}
