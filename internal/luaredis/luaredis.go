// Package luaredis is an in-memory Redis that runs Lua scripts the way
// Redis 7.0 does, on a clock its caller moves. It exists for the protocol
// simulator (lockstore's sim_*_test.go): the gateway's real scripts, run on
// a node whose time, pauses and data loss the simulator decides, one command
// at a time, deterministically.
//
// It implements only what lockstore's scripts use (strings, hashes, sorted
// sets, per-key expiry, TIME, PUBLISH), with Redis's semantics and reply
// conversions. That it behaves as Redis does is not assumed: lockstore's
// differential test (luaredis_diff_internal_test.go) runs the same scripts
// and commands against a real redis-server whose clock is frozen to this
// one's, and compares every reply and all key state.
//
// Time: keys expire lazily, when a command reads them after their expiry
// (now > expiry, in ms), as Redis does; a script sees one instant (the
// clock does not move while it runs), which is what Redis's expiry does
// (it freezes time for the script) and, with a frozen clock, its TIME.
package luaredis

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// Error is an error reply. It satisfies go-redis's redis.Error, so code
// that translates Redis errors treats it as one.
type Error string

func (e Error) Error() string { return string(e) }

// RedisError marks Error as a reply from Redis (go-redis's redis.Error).
func (Error) RedisError() {}

// status is a status reply ("+OK"). Replies leave the package as strings,
// as go-redis returns them; inside, a script sees {ok = "OK"}.
type status string

type kind int

const (
	kindString kind = iota + 1
	kindHash
	kindZset
)

func (k kind) String() string {
	switch k {
	case kindString:
		return "string"
	case kindHash:
		return "hash"
	case kindZset:
		return "zset"
	}
	return "none"
}

type entry struct {
	kind   kind
	str    string
	hash   map[string]string
	zset   map[string]float64
	expiry int64 // Unix ms; noExpiry when none
}

const noExpiry = -1

// Message is one PUBLISH or SPUBLISH a script or a caller sent.
type Message struct {
	Command, Channel, Payload string
}

// Server is one Redis node. It is not safe for concurrent use: the
// simulator is single-threaded, as is Redis.
type Server struct {
	nowUs   int64
	keys    map[string]*entry
	scripts map[string]string // SHA-1 → source (SCRIPT LOAD, EVAL)
	lua     *engine
	// Published holds every message published, oldest first, until the
	// caller clears it.
	Published []Message
	// KeepMessages: record messages in Published (off: drop them).
	KeepMessages bool
	// RunID is what INFO says the server's run id is: 40 hex digits, a
	// new one for each New (a restarted server is a new Server).
	RunID string
}

// servers counts the Servers made, for their run ids.
var servers atomic.Uint64

// New returns an empty server whose clock reads 0 until SetTime.
func New() *Server {
	s := &Server{keys: map[string]*entry{}, scripts: map[string]string{}, RunID: fmt.Sprintf("%040x", servers.Add(1))}
	s.lua = newEngine(s)
	return s
}

// SetTime sets the server's clock, Unix microseconds. It may go back (a
// clock step); Redis then simply reads the earlier time.
func (s *Server) SetTime(us int64) { s.nowUs = us }

// Time is the server's clock, Unix microseconds.
func (s *Server) Time() int64 { return s.nowUs }

func (s *Server) nowMs() int64 { return floorDiv(s.nowUs, 1000) }

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}

// FlushAll forgets every key and every loaded script: a restart without
// persistence.
func (s *Server) FlushAll() {
	s.keys = map[string]*entry{}
	s.scripts = map[string]string{}
}

// lookup returns key's entry, deleting it first if it has expired.
func (s *Server) lookup(key string) *entry {
	e := s.keys[key]
	if e == nil {
		return nil
	}
	if e.expiry != noExpiry && s.nowMs() > e.expiry {
		delete(s.keys, key)
		return nil
	}
	return e
}

var errWrongType = Error("WRONGTYPE Operation against a key holding the wrong kind of value")

// typed returns key's entry if it has kind k, nil if there is none, or the
// WRONGTYPE error.
func (s *Server) typed(key string, k kind) (*entry, error) {
	e := s.lookup(key)
	if e != nil && e.kind != k {
		return nil, errWrongType
	}
	return e, nil
}

// Do runs one command, as a client would send it, and returns its reply in
// go-redis's terms, as on a RESP2 connection (a script's reply is the
// same on RESP3, go-redis's default): int64, string (bulk or
// status), nil (a nil bulk), []any, or an Error. Arguments are converted as
// go-redis does.
func (s *Server) Do(args ...any) (any, error) {
	argv := make([]string, len(args))
	for i, a := range args {
		argv[i] = Arg(a)
	}
	return external(s.command(argv, false))
}

// Eval runs EVAL script with keys and args. A script's reply is the same
// on RESP2 and RESP3 connections (see toReply).
func (s *Server) Eval(script string, keys []string, args ...any) (any, error) {
	return s.Do(append(append([]any{"EVAL", script, len(keys)}, toAny(keys)...), args...)...)
}

// EvalSha runs EVALSHA; a script this server never saw (or forgot in a
// FlushAll) answers NOSCRIPT, as Redis does.
func (s *Server) EvalSha(sha string, keys []string, args ...any) (any, error) {
	return s.Do(append(append([]any{"EVALSHA", sha, len(keys)}, toAny(keys)...), args...)...)
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, v := range ss {
		out[i] = v
	}
	return out
}

// external turns an internal reply into go-redis's terms.
func external(r any) (any, error) {
	switch v := r.(type) {
	case Error:
		return nil, v
	case status:
		return string(v), nil
	case []any:
		out := make([]any, len(v))
		for i, x := range v {
			if e, ok := x.(Error); ok {
				out[i] = e // go-redis keeps an error inside an array as a value
				continue
			}
			out[i], _ = external(x)
		}
		return out, nil
	}
	return r, nil
}

// Arg converts a command argument as go-redis's appendArg does for the
// types lockstore passes.
func Arg(a any) string {
	switch v := a.(type) {
	case string:
		return v
	case []byte:
		return string(v)
	case int:
		return fmt.Sprint(v)
	case int64:
		return fmt.Sprint(v)
	case int32:
		return fmt.Sprint(v)
	case uint64:
		return fmt.Sprint(v)
	case float64:
		return formatGoFloat(v)
	case bool:
		if v {
			return "1"
		}
		return "0"
	case nil:
		return ""
	}
	return fmt.Sprint(a)
}

// Sha1 is the hex SHA-1 Redis names a script by. The simulator asks it
// for the same few sources at every call (EVAL names its script by it):
// hashing them each time was a tenth of a simulator's CPU, so each
// source's is kept.
func Sha1(script string) string {
	if sha, ok := shas.Load(script); ok {
		return sha.(string)
	}
	h := sha1.Sum([]byte(script))
	sha := hex.EncodeToString(h[:])
	shas.Store(script, sha)
	return sha
}

var shas sync.Map // script source → Sha1

// Load puts a script in the script cache (SCRIPT LOAD) and returns its SHA-1.
func (s *Server) Load(script string) string {
	sha := Sha1(script)
	s.scripts[sha] = script
	return sha
}

// Value is one key's state, for comparing servers: Kind is "string",
// "hash" or "zset"; Str, Hash or Zset holds the data (zset members with
// their scores); Expiry is Unix ms, or -1 without one.
type Value struct {
	Kind   string
	Str    string
	Hash   map[string]string
	Zset   map[string]float64
	Expiry int64
}

// Dump returns every live key's state. Like KEYS it skips expired keys
// without deleting them: a key past its expiry that no command touched
// comes back if the clock steps back, in Redis too.
func (s *Server) Dump() map[string]Value {
	out := map[string]Value{}
	for _, k := range s.sortedKeys() {
		e := s.keys[k]
		if e.expiry != noExpiry && s.nowMs() > e.expiry {
			continue
		}
		v := Value{Kind: e.kind.String(), Str: e.str, Expiry: e.expiry}
		if e.hash != nil {
			v.Hash = map[string]string{}
			for f, x := range e.hash {
				v.Hash[f] = x
			}
		}
		if e.zset != nil {
			v.Zset = map[string]float64{}
			for m, x := range e.zset {
				v.Zset[m] = x
			}
		}
		out[k] = v
	}
	return out
}

// Peek returns one live key's state without touching it (an expired key
// is not deleted, as no command read it).
func (s *Server) Peek(key string) (Value, bool) {
	e := s.keys[key]
	if e == nil || (e.expiry != noExpiry && s.nowMs() > e.expiry) {
		return Value{}, false
	}
	v := Value{Kind: e.kind.String(), Str: e.str, Expiry: e.expiry, Hash: e.hash, Zset: e.zset}
	return v, true
}

func (s *Server) sortedKeys() []string {
	ks := make([]string, 0, len(s.keys))
	for k := range s.keys {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// command runs argv; inScript says it comes from redis.call/pcall.
func (s *Server) command(argv []string, inScript bool) any {
	if len(argv) == 0 {
		return Error("ERR empty command")
	}
	name := strings.ToUpper(argv[0])
	c, ok := commands[name]
	if !ok {
		return Error(fmt.Sprintf("ERR unknown command '%s', with args beginning with: ", argv[0]))
	}
	if (c.arity > 0 && len(argv) != c.arity) || (c.arity < 0 && len(argv) < -c.arity) {
		return Error(fmt.Sprintf("ERR wrong number of arguments for '%s' command", strings.ToLower(argv[0])))
	}
	if inScript && c.noScript {
		return Error("ERR This Redis command is not allowed from script")
	}
	return c.run(s, argv[1:])
}
