package script

import (
	"context"
	_ "embed"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/lockstore"
	"github.com/lockgateway/lockgateway/lockstore/internal/listing"
	"github.com/redis/go-redis/v9"
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

// keyspace is how one kind of object is named in Redis: "lockgw:{" +
// tag + key + "}" + suffix, one Redis key per object. Locks are
// locksKeyspace; a listing of semaphores would scan theirs
// ("lockgw:{sem#<key>}:permits") the same way.
type Keyspace struct{ Tag, Suffix string }

var LocksKeyspace = Keyspace{Tag: "", Suffix: ":lock"}

// match is the SCAN pattern of the keys under prefix.
func (ks Keyspace) Match(prefix string) string {
	return "lockgw:{" + globEscape(ks.Tag+prefix) + "*}" + ks.Suffix
}

// key is the object key a Redis key names.
func (ks Keyspace) Key(redisKey string) (string, bool) {
	rest, ok := strings.CutPrefix(redisKey, "lockgw:{"+ks.Tag)
	if !ok {
		return "", false
	}
	key, ok := strings.CutSuffix(rest, "}"+ks.Suffix)
	if !ok || key == "" || strings.ContainsAny(key, "{}") {
		return "", false
	}
	return key, true
}

// scanKeyspace offers top every listable key of ks on one Redis node.
func ScanKeyspace(ctx context.Context, c redis.Cmdable, ks Keyspace, q lockstore.ListQuery, top *listing.Smallest) error {
	match := ks.Match(q.Prefix)
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, match, listScanCount).Result()
		if err != nil {
			return RedisErr(err)
		}
		for _, k := range keys {
			if key, ok := ks.Key(k); ok && q.Includes(key) {
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
type NodeListed struct {
	key       string
	Held      bool
	Value     LockValue
	Remaining time.Duration
	Waiters   int
	start     time.Time
}

func (n NodeListed) Listed() lockstore.Listed {
	return lockstore.Listed{Lease: n.Value.Found(n.key, n.Remaining, n.start), Waiters: n.Waiters}
}

// readListed runs list.lua for each key in one pipeline (split by slot on
// a Cluster), the script loaded first: a pipelined EVALSHA cannot fall
// back to EVAL by itself. On a Cluster it is loaded on the masters only
// (go-redis's ScriptLoad asks every replica too, and one down would fail
// the listing).
func ReadListed(ctx context.Context, c redis.UniversalClient, keys []string) ([]NodeListed, error) {
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
		return nil, RedisErr(err)
	}
	start := time.Now()
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(keys))
	for i, k := range keys {
		cmds[i] = pipe.EvalSha(ctx, listScript.Hash(), []string{LockKey(k), QueueKey(k)})
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, RedisErr(err)
	}
	out := make([]NodeListed, len(keys))
	for i, cmd := range cmds {
		reply, err := cmd.Slice()
		if err != nil {
			return nil, RedisErr(err)
		}
		out[i] = NodeListed{key: keys[i], start: start}
		if len(reply) == 0 {
			continue
		}
		if len(reply) != 3 {
			return nil, fmt.Errorf("lockstore: list script replied %v", reply)
		}
		v, err := ParseLockValue(reply[0])
		if err != nil {
			return nil, err
		}
		pttl, _ := reply[1].(int64)
		waiters, _ := reply[2].(int64)
		if pttl <= 0 { // no time left: not a lock to list
			continue
		}
		out[i] = NodeListed{key: keys[i], Held: true, Value: v, Remaining: pttlDuration(pttl), Waiters: int(waiters), start: start}
	}
	return out, nil
}

// sortedKeys returns m's keys in order.
func SortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// semKeyspace names a semaphore by its permits hash.
var SemKeyspace = Keyspace{Tag: SemTag, Suffix: ":permits"}
