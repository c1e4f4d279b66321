package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	lockredis "github.com/lockgateway/lockgateway/lockstore/redis"

	"github.com/redis/go-redis/v9"
)

// FenceRetention and WaitQueueTTL mirror lockstore's: a fence counter
// outlives its key's last lease by lockstore/redis.FenceMargin (a second more is
// allowed for a Redlock seed a little ahead of the node's clock), and a
// wait queue lives twice the waiters' 3 s heartbeat.
const (
	FenceRetention = lockredis.FenceMargin + time.Second
	WaitQueueTTL   = 6 * time.Second
)

// State checks what the gateways leave in Redis: every lockgw key but a
// Redlock node's node list marker and longest-lease record has a TTL, a lock key's TTL is never above the maximum TTL (a queue's above its
// heartbeat allowance, a fence counter's above the retention), and once the
// maximum TTL has passed without activity no lock key is left.
type State struct {
	MaxTTL time.Duration

	mu      sync.Mutex
	found   map[string]Violation // by node and key: the first finding only
	order   []string
	samples int
}

// NewState returns a checker for a gateway configured with maxTTL.
func NewState(maxTTL time.Duration) *State {
	return &State{MaxTTL: maxTTL, found: map[string]Violation{}}
}

// Sample scans one node's lockgw keys and checks their TTLs. A node that
// does not answer (killed, paused) is skipped.
func (s *State) Sample(ctx context.Context, node string, c *redis.Client) {
	s.scan(ctx, node, c, func(key string, pttl time.Duration) string {
		if key == "lockgw:redlock:set" || key == "lockgw:redlock:maxttl" {
			// The node list a Redlock node serves, and the longest
			// LOCKGW_MAX_TTL its gateways had, live as long as the
			// deployment (docs/safety.md, "Changing the node list", A6).
			return ""
		}
		if pttl == -1*time.Nanosecond || pttl == -1*time.Millisecond {
			return "has no TTL"
		}
		var limit time.Duration
		switch {
		case strings.HasSuffix(key, ":lock"):
			limit = s.MaxTTL
		case strings.HasSuffix(key, ":fence"):
			limit = s.MaxTTL + FenceRetention
		case strings.HasSuffix(key, ":queue"), strings.HasSuffix(key, ":alive"):
			limit = WaitQueueTTL
		default:
			return ""
		}
		if pttl > limit+expirySlack {
			return fmt.Sprintf("has %v to live, above the %v allowed", pttl, limit)
		}
		return ""
	})
	s.mu.Lock()
	s.samples++
	s.mu.Unlock()
}

// Drained checks that no lock key is left on a node; call it once the
// maximum TTL has passed since the last request that could have written one.
func (s *State) Drained(ctx context.Context, node string, c *redis.Client) {
	s.scan(ctx, node, c, func(key string, pttl time.Duration) string {
		if strings.HasSuffix(key, ":lock") {
			return fmt.Sprintf("is left after the maximum TTL (%v to live)", pttl)
		}
		return ""
	})
}

// Violations reports what the samples found.
func (s *State) Violations() []Violation {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Violation, 0, len(s.order))
	for _, k := range s.order {
		out = append(out, s.found[k])
	}
	return out
}

// Samples reports how many node scans were made.
func (s *State) Samples() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples
}

func (s *State) scan(ctx context.Context, node string, c *redis.Client, judge func(key string, pttl time.Duration) string) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, "lockgw:*", 1000).Result()
		if err != nil {
			return // a node down or paused is not a finding
		}
		if len(keys) > 0 {
			cmds, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.PTTL(ctx, k)
				}
				return nil
			})
			if err != nil && err != redis.Nil {
				return
			}
			for i, cmd := range cmds {
				pttl, err := cmd.(*redis.DurationCmd).Result()
				if err != nil || pttl == -2*time.Nanosecond || pttl == -2*time.Millisecond {
					continue // gone between SCAN and PTTL
				}
				if what := judge(keys[i], pttl); what != "" {
					s.add(node, keys[i], what)
				}
			}
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

func (s *State) add(node, key, what string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := node + " " + key
	if _, ok := s.found[id]; ok {
		return
	}
	s.found[id] = Violation{Checker: "state", Key: key, Detail: "on " + node + ": " + what}
	s.order = append(s.order, id)
}
