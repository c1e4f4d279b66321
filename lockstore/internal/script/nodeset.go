package script

import (
	"context"
	"crypto/sha1"
	_ "embed"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// The node list a Redlock's nodes serve. Two gateways with different lists
// could grant one key on two majorities that share no node, so each node
// keeps a marker, setKey, naming the list it serves, and the scripts that
// grant or lengthen refuse (changing nothing) on a node whose marker is not
// the caller's list. docs/safety.md, "Changing the node list", has the
// rules and the argument; this file is all of it on the gateway's side.

var (
	//go:embed lua/nodeset.lua
	NodesetLua string

	//go:embed lua/nodeset_mark.lua
	NodesetMarkLua    string
	NodesetMarkScript = redis.NewScript(NodesetMarkLua)

	// guardedScripts are the scripts that grant or lengthen, by the hash
	// of their plain form, each with nodeset.lua in front.
	GuardedScripts = guard("acquire.lua", "extend.lua", "confirm.lua", "sem_acquire.lua", "sem_extend.lua", "sem_confirm.lua")
)

// setKey, on each Redlock node, is the node list it serves: canonical
// (nodeSet.list).
const SetKey = "lockgw:redlock:set"

// quarantineKey, on a Redlock node, lives while the node is quarantined
// because it was found without a marker: it lost its data (docs/safety.md,
// "Restarted nodes", rule Q). nodeset.lua refuses every grant and extend
// while it exists.
const QuarantineKey = "lockgw:redlock:quarantine"

// settleKey, on a Redlock node of the previous list during a transition,
// lives the longest lease plus drift after the node stopped serving that
// list (docs/safety.md, rule T): once a majority of the previous list's
// nodes have none left, no lease of that list can be alive.
const SettleKey = "lockgw:redlock:settle"

// maxTTLKey, on a Redlock node, is the longest LOCKGW_MAX_TTL of the
// gateways that marked or read it (ms): quarantines and settle keys last at
// least that plus drift, whichever gateway writes them, and a gateway votes
// only on a node that knows its own (nodeset.lua).
const MaxTTLKey = "lockgw:redlock:maxttl"

// maxTTLReply starts nodeset.lua's answer on a node that knows a shorter
// longest lease than the caller's (followed by the one it knows): the
// caller records its own and calls again.
const MaxTTLReply = "LOCKGW_MAXTTL "

// quarantineReply starts nodeset.lua's answer on a quarantined node,
// followed by the ms it has left.
const QuarantineReply = "LOCKGW_QUARANTINE "

// nodesetReply starts the error nodeset.lua answers, followed by the marker.
const NodesetReply = "LOCKGW_NODESET "

type guardedScript struct {
	Src    string
	Script *redis.Script
}

func guard(names ...string) map[string]guardedScript {
	m := make(map[string]guardedScript, len(names))
	for _, name := range names {
		src := Sources[name]
		g := NodesetLua + src
		m[Sha1Hex(src)] = guardedScript{Src: g, Script: redis.NewScript(g)}
	}
	return m
}

func Sha1Hex(s string) string {
	h := sha1.Sum([]byte(s))
	return hex.EncodeToString(h[:])
}

// NodesetMarkArgs is what one nodeset_mark.lua call needs (its header
// names each).
type NodesetMarkArgs struct {
	List, Op string
	// Tentative is how long a tentative marker lives, Quarantine a
	// restarted node's quarantine, Settle a settle key's life.
	Tentative, Quarantine, Settle time.Duration
	// Prev is the previous list during a transition ("" none), and InPrev
	// whether the node is one of its.
	Prev   string
	InPrev bool
	// MaxTTL is the gateway's longest lease (LOCKGW_MAX_TTL).
	MaxTTL time.Duration
}

// NodesetMark runs nodeset_mark.lua's op on one node, and answers the
// marker and the settle key's PTTL (-2: none) it found.
func NodesetMark(ctx context.Context, c redis.Scripter, a NodesetMarkArgs) (marker string, settlePTTL int64, err error) {
	inPrev := "0"
	if a.InPrev {
		inPrev = "1"
	}
	reply, err := NodesetMarkScript.Run(ctx, c, []string{SetKey, QuarantineKey, SettleKey, MaxTTLKey}, a.List, a.Op,
		a.Tentative.Milliseconds(), a.Quarantine.Milliseconds(), a.Prev, inPrev, a.Settle.Milliseconds(), a.MaxTTL.Milliseconds()).Slice()
	if err != nil {
		return "", 0, RedisErr(err)
	}
	if len(reply) != 2 {
		return "", 0, fmt.Errorf("lockstore: nodeset_mark script replied %v", reply)
	}
	marker, _ = reply[0].(string)
	settlePTTL, _ = reply[1].(int64)
	return marker, settlePTTL, nil
}
