package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/lockgateway/lockgateway/client"
)

// Do work under a lock: Hold keeps the lease alive and cancels ctx the
// moment the lease is lost. The fence goes with every write, so that the
// storage can refuse a holder that was paused past its lease.
func ExampleClient_Hold() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	err = c.Hold(context.Background(), "reports/daily", client.AcquireOptions{TTL: 30 * time.Second},
		func(ctx context.Context, lease *client.Lease) error {
			// UPDATE reports SET body = $1, fence = $2 WHERE id = $3 AND fence <= $2
			return writeReport(ctx, lease.Fence)
		})
	switch {
	case errors.Is(err, client.ErrHeld):
		fmt.Println("someone else is writing the report")
	case errors.Is(err, client.ErrLockLost):
		fmt.Println("lost the lock; the work was cancelled")
	case err != nil:
		log.Fatal(err)
	}
}

// Take a lock, waiting up to 10 s for it, and release it.
func ExampleClient_Acquire() {
	c, err := client.New("http://127.0.0.1:8080")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	lease, err := c.Acquire(ctx, "jobs/nightly", client.AcquireOptions{TTL: time.Minute, Wait: 10 * time.Second, Owner: "worker-7"})
	var e *client.Error
	if errors.As(err, &e) && errors.Is(err, client.ErrHeld) {
		fmt.Println("still held; the holder's lease ends in", e.RetryAfter)
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer c.Release(ctx, lease.Key, lease.Token)
	fmt.Println("holding", lease.Key, "with fence", lease.Fence)
}

func writeReport(context.Context, int64) error { return nil }
