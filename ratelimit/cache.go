package ratelimit

import (
	"sync"
	"time"

	"github.com/lockgateway/lockgateway/internal/expiry"
)

// refusals remembers, per user, until when the user is known to be refused.
// Entries are dropped when their time comes, and the cache never holds more
// than max users: when full, a new user is simply not cached, which costs a
// store round trip, never a wrong answer.
type refusals struct {
	mu    sync.Mutex
	max   int
	users map[string]*expiry.Entry[string] // At: refused until, monotonic
	queue expiry.Queue[string]
}

func newRefusals(max int) *refusals {
	return &refusals{max: max, users: make(map[string]*expiry.Entry[string])}
}

// refusedFor returns how long user is still known to be refused, or 0.
func (c *refusals) refusedFor(user string, now time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(now)
	if e, ok := c.users[user]; ok {
		return e.At.Sub(now)
	}
	return 0
}

func (c *refusals) refuseUntil(user string, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.evict(time.Now())
	if e, ok := c.users[user]; ok {
		if until.After(e.At) {
			c.queue.Move(e, until)
		}
		return
	}
	if len(c.users) < c.max {
		c.users[user] = c.queue.Add(user, until)
	}
}

func (c *refusals) evict(now time.Time) {
	c.queue.PopExpired(now, func(user string) { delete(c.users, user) })
}
