package script

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lua/confirm.lua
	ConfirmLua    string
	ConfirmScript = redis.NewScript(DeadlineLua + ConfirmLua)

	//go:embed lua/discard.lua
	DiscardLua    string
	DiscardScript = redis.NewScript(DiscardLua)
)

// Confirm codes, of confirm.lua and sem_confirm.lua (their headers list
// the others).
const (
	ConfirmMade   = 1 // this round made the value a lease
	ConfirmJoined = 3 // another round had; its fence is now this round's
)

// Confirm runs confirm.lua for a Redlock round maker on one node: make the
// round's value of digest on key the lease with fence, ttl long. It
// answers the script's code, and for ConfirmMade the lease as it left it,
// value and expiry.
func Confirm(ctx context.Context, c redis.Scripter, key, digest, maker string, fence int64, ttl time.Duration) (int64, LockValue, error) {
	reply, err := ConfirmScript.Run(ctx, c, []string{LockKey(key), FenceKey(key)},
		digest, maker, strconv.FormatInt(fence, 10), FenceMargin.Milliseconds(), ttl.Milliseconds()).Slice()
	if err != nil {
		return 0, LockValue{}, RedisErr(err)
	}
	code, _ := reply[0].(int64)
	if code != ConfirmMade {
		return code, LockValue{}, nil
	}
	if len(reply) != 3 {
		return 0, LockValue{}, fmt.Errorf("lockstore: confirm script replied %v", reply)
	}
	v, err := ParseLockValue(reply[1])
	v.Expiry, _ = reply[2].(int64)
	return code, v, err
}

// SemConfirm is Confirm for a permit in slot (sem_confirm.lua); for
// ConfirmMade the permit as left (its value carries its expiry).
func SemConfirm(ctx context.Context, c redis.Scripter, key, digest, maker string, fence int64, slot int, ttl time.Duration) (int64, SemValue, error) {
	reply, err := SemConfirmScript.Run(ctx, c, []string{SemPermitsKey(key), SemExpiryKey(key), SemFenceKey(key)},
		digest, maker, strconv.FormatInt(fence, 10), strconv.FormatInt(FenceMargin.Milliseconds(), 10), slot, ttl.Milliseconds(), SemChannel(key)).Slice()
	if err != nil {
		return 0, SemValue{}, RedisErr(err)
	}
	code, _ := reply[0].(int64)
	if code != ConfirmMade {
		return code, SemValue{}, nil
	}
	if len(reply) != 2 {
		return 0, SemValue{}, fmt.Errorf("lockstore: sem_confirm script replied %v", reply)
	}
	v, err := ParseSemValue(slot, reply[1])
	return code, v, err
}

// Discard withdraws a failed Redlock round's provisional value of digest
// on key (discard.lua, W).
func Discard(ctx context.Context, c redis.Scripter, key, digest, round string) error {
	return DiscardScript.Run(ctx, c, []string{LockKey(key), QueueKey(key)}, digest, round, Channel(key)).Err()
}

// SemDiscard is Discard for a permit (sem_discard.lua).
func SemDiscard(ctx context.Context, c redis.Scripter, key, digest, round string) error {
	return SemDiscardScript.Run(ctx, c, []string{SemPermitsKey(key), SemExpiryKey(key)}, digest, round, SemChannel(key)).Err()
}

// makerOf is the round that made a Redlock value, from its field "~<id>"
// (an older gateway's "~<id1>.<id2>…" was made by id1); none ("") for a
// pinned "~!<id>" of an older gateway, which a round of this one never
// confirms.
func MakerOf(field string) string {
	if strings.HasPrefix(field, "~!") {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(field, "~"), ".")
	return id
}
