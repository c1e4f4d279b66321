package lockstore

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/lockstore/internal/listing"
)

var (
	//go:embed lua/list.lua
	listLua    string
	listScript = redis.NewScript(listLua)
)

// listScanCount is SCAN's COUNT in a listing: how many keys Redis looks at
// in one call, so that no call holds Redis up for long (a few hundred µs);
// a listing of a Redis holding N keys makes about N/listScanCount calls
// per page, on every master.
const listScanCount = 1000

var _ Lister = (*Redis)(nil)

// List implements Lister: SCAN (never KEYS) of every master's keyspace for
// lock keys under the prefix, keeping the Limit+1 smallest after the
// cursor, then one read (list.lua) of each of the page's locks, pipelined.
// A master that does not answer fails the listing (ErrUnavailable): a
// page without its locks would say they are free.
func (s *Redis) List(ctx context.Context, q ListQuery) (ListPage, error) {
	if err := CheckList(q); err != nil {
		return ListPage{}, err
	}
	top, err := s.scan(ctx, q)
	if err != nil {
		return ListPage{}, err
	}
	keys, next := listing.Page(top, q.Limit)
	items, err := readListed(ctx, s.client, keys)
	if err != nil {
		return ListPage{}, err
	}
	out := make([]Listed, 0, len(keys))
	for _, it := range items {
		if it.held {
			out = append(out, it.listed())
		}
	}
	return ListPage{Items: out, Next: next}, nil
}

// scan returns the Limit+1 smallest listable lock keys, sorted.
func (s *Redis) scan(ctx context.Context, q ListQuery) ([]string, error) {
	return s.scanKeys(ctx, locksKeyspace, q)
}

// scanKeys returns the Limit+1 smallest listable keys of ks, sorted: on a
// Cluster the smallest of each master's, merged (a key lives on one
// master).
func (s *Redis) scanKeys(ctx context.Context, ks keyspace, q ListQuery) ([]string, error) {
	cc, ok := s.client.(*redis.ClusterClient)
	if !ok {
		top := listing.NewSmallest(q.Limit + 1)
		// Two statements: Go leaves the order of top.Keys and a call in
		// one return list unspecified.
		err := scanKeyspace(ctx, s.client, ks, q, top)
		return top.Keys, err
	}
	var mu sync.Mutex
	all := listing.NewSmallest(q.Limit + 1)
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		top := listing.NewSmallest(q.Limit + 1)
		if err := scanKeyspace(ctx, c, ks, q, top); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, k := range top.Keys {
			all.Offer(k)
		}
		return nil
	})
	if err != nil {
		return nil, redisErr(err)
	}
	return all.Keys, nil
}

// keyspace is how one kind of object is named in Redis: "lockgw:{" +
// tag + key + "}" + suffix, one Redis key per object. Locks are
// locksKeyspace; a listing of semaphores would scan theirs
// ("lockgw:{sem#<key>}:permits") the same way.
type keyspace struct{ tag, suffix string }

var locksKeyspace = keyspace{tag: "", suffix: ":lock"}

// match is the SCAN pattern of the keys under prefix.
func (ks keyspace) match(prefix string) string {
	return "lockgw:{" + globEscape(ks.tag+prefix) + "*}" + ks.suffix
}

// key is the object key a Redis key names.
func (ks keyspace) key(redisKey string) (string, bool) {
	rest, ok := strings.CutPrefix(redisKey, "lockgw:{"+ks.tag)
	if !ok {
		return "", false
	}
	key, ok := strings.CutSuffix(rest, "}"+ks.suffix)
	if !ok || key == "" || strings.ContainsAny(key, "{}") {
		return "", false
	}
	return key, true
}

// scanKeyspace offers top every listable key of ks on one Redis node.
func scanKeyspace(ctx context.Context, c redis.Cmdable, ks keyspace, q ListQuery, top *listing.Smallest) error {
	match := ks.match(q.Prefix)
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, listScanCount).Result()
		if err != nil {
			return redisErr(err)
		}
		for _, k := range keys {
			if key, ok := ks.key(k); ok && q.Includes(key) {
				top.Offer(key)
			}
		}
		if next == 0 {
			return nil
		}
		cursor = next
	}
}

// globEscape makes s match itself in a SCAN MATCH pattern. Lock keys hold
// none of its special characters, but a prefix is checked by the HTTP
// layer, not here.
func globEscape(s string) string {
	if !strings.ContainsAny(s, `*?[]\^`) {
		return s
	}
	var b strings.Builder
	for _, c := range []byte(s) {
		if strings.IndexByte(`*?[]\^`, c) >= 0 {
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// nodeListed is one lock as list.lua read it on one node.
type nodeListed struct {
	key       string
	held      bool
	value     lockValue
	remaining time.Duration
	waiters   int
	start     time.Time
}

func (n nodeListed) listed() Listed {
	l := n.value.lease(n.key, "", n.remaining, n.start)
	l.Granted, l.Left = n.value.length, n.remaining
	return Listed{Lease: l, Waiters: n.waiters}
}

// readListed runs list.lua for each key in one pipeline (split by slot on
// a Cluster), the script loaded first: a pipelined EVALSHA cannot fall
// back to EVAL by itself. On a Cluster it is loaded on the masters only
// (go-redis's ScriptLoad asks every replica too, and one down would fail
// the listing).
func readListed(ctx context.Context, c redis.UniversalClient, keys []string) ([]nodeListed, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	var err error
	if cc, ok := c.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
			return listScript.Load(ctx, m).Err()
		})
	} else {
		err = listScript.Load(ctx, c).Err()
	}
	if err != nil {
		return nil, redisErr(err)
	}
	start := time.Now()
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.EvalSha(ctx, listScript.Hash(), []string{lockKey(k), queueKey(k)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, redisErr(err)
	}
	out := make([]nodeListed, len(keys))
	for i, cmd := range cmds {
		reply, err := cmd.Slice()
		if err != nil {
			return nil, redisErr(err)
		}
		out[i] = nodeListed{key: keys[i], start: start}
		if len(reply) == 0 {
			continue
		}
		if len(reply) != 3 {
			return nil, fmt.Errorf("lockstore: list script replied %v", reply)
		}
		v, err := parseLockValue(reply[0])
		if err != nil {
			return nil, err
		}
		pttl, _ := reply[1].(int64)
		waiters, _ := reply[2].(int64)
		if pttl <= 0 { // no time left: not a lock to list
			continue
		}
		out[i] = nodeListed{key: keys[i], held: true, value: v, remaining: pttlDuration(pttl), waiters: int(waiters), start: start}
	}
	return out, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
