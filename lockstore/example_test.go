package lockstore_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/memory"
)

// A worker takes jobs/nightly so only one instance runs the job, passes the
// fence to whatever it writes, and releases the lock when done.
func Example() {
	ctx := context.Background()
	store := memory.New() // or lockstore.NewRedis(client)

	me := lockstore.NewToken()
	lease, err := store.Acquire(ctx, "jobs/nightly", lockstore.AcquireRequest{Token: me, TTL: 30 * time.Second, Owner: "worker-7"})
	if err != nil {
		panic(err)
	}
	fmt.Println("held by", lease.Owner)

	// Another instance is told the lock is taken, and for how long.
	_, err = store.Acquire(ctx, "jobs/nightly", lockstore.AcquireRequest{Token: lockstore.NewToken(), TTL: 30 * time.Second})
	var held *lockstore.HeldError
	fmt.Println("second instance:", errors.As(err, &held) && held.Remaining > 29*time.Second)

	// Only the holder's token releases it.
	fmt.Println(errors.Is(store.Release(ctx, "jobs/nightly", lockstore.NewToken()), lockstore.ErrTokenMismatch))
	fmt.Println(store.Release(ctx, "jobs/nightly", me))
	// Output:
	// held by worker-7
	// second instance: true
	// true
	// <nil>
}
