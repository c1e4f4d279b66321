package luaredis

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/parse"
)

// engine runs scripts as Redis 7.0 does: Lua 5.1 (gopher-lua), the
// base, table, string and math libraries, a read-only global table, KEYS
// and ARGV, and redis.call / redis.pcall with Redis's conversions between
// Lua values and replies.
//
// Known differences from Redis's Lua, none of which lockstore's scripts
// meet (they format numbers with string.format('%.0f') before they
// concatenate them, which is exact in both): gopher-lua turns a number
// into a string for ".." with all its digits where Lua 5.1 uses "%.14g"
// (tostring is replaced here and does use "%.14g"); cjson, cmsgpack,
// struct and bit are absent.
type engine struct {
	s *Server
	L *lua.LState
}

func newEngine(s *Server) *engine {
	L := lua.NewState(lua.Options{SkipOpenLibs: true})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	e := &engine{s: s, L: L}
	g := L.G.Global
	for _, name := range []string{"dofile", "loadfile", "load", "loadstring", "require", "module", "print", "collectgarbage", "newproxy", "setfenv", "getfenv", "_printregs"} {
		g.RawSetString(name, lua.LNil)
	}
	g.RawSetString("tostring", L.NewFunction(luaToString))
	g.RawSetString("tonumber", L.NewFunction(luaToNumber))
	r := L.NewTable()
	r.RawSetString("call", L.NewFunction(func(L *lua.LState) int { return e.call(L, true) }))
	r.RawSetString("pcall", L.NewFunction(func(L *lua.LState) int { return e.call(L, false) }))
	r.RawSetString("error_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		t.RawSetString("err", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	r.RawSetString("status_reply", L.NewFunction(func(L *lua.LState) int {
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(L.CheckString(1)))
		L.Push(t)
		return 1
	}))
	r.RawSetString("sha1hex", L.NewFunction(func(L *lua.LState) int {
		L.Push(lua.LString(Sha1(L.CheckString(1))))
		return 1
	}))
	r.RawSetString("log", L.NewFunction(func(*lua.LState) int { return 0 }))
	for i, n := range []string{"LOG_DEBUG", "LOG_VERBOSE", "LOG_NOTICE", "LOG_WARNING"} {
		r.RawSetString(n, lua.LNumber(i))
	}
	g.RawSetString("redis", r)
	// Redis 7.0 protects the globals: a script may neither read an
	// undefined global nor create one.
	mt := L.NewTable()
	mt.RawSetString("__index", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckAny(2).String())
		return 0
	}))
	mt.RawSetString("__newindex", L.NewFunction(func(L *lua.LState) int {
		L.RaiseError("Attempt to modify a readonly table")
		return 0
	}))
	L.SetMetatable(g, mt)
	return e
}

// luaToString is Lua 5.1's tostring: numbers with "%.14g".
func luaToString(L *lua.LState) int {
	v := L.CheckAny(1)
	if n, ok := v.(lua.LNumber); ok {
		L.Push(lua.LString(formatLuaNumber(float64(n))))
		return 1
	}
	L.Push(L.ToStringMeta(v))
	return 1
}

// formatG17 is C's printf("%.17g"), whose inf and nan Go spells
// otherwise.
func formatG17(f float64) string {
	switch {
	case math.IsNaN(f) && math.Signbit(f):
		return "-nan"
	case math.IsNaN(f):
		return "nan"
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return fmt.Sprintf("%.17g", f)
}

func formatLuaNumber(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	return fmt.Sprintf("%.14g", f)
}

// luaToNumber is Lua 5.1's tonumber (strtod, surrounding spaces allowed,
// hexadecimal), where gopher-lua's refuses "1e3".
func luaToNumber(L *lua.LState) int {
	v := L.CheckAny(1)
	base := L.OptInt(2, 10)
	switch x := v.(type) {
	case lua.LNumber:
		if base == 10 {
			L.Push(x)
			return 1
		}
	case lua.LString:
		s := strings.Trim(string(x), " \t\n\r\v\f")
		if base == 10 {
			if f, err := strconv.ParseFloat(s, 64); err == nil && !strings.Contains(s, "_") {
				L.Push(lua.LNumber(f))
				return 1
			}
			h := strings.TrimPrefix(strings.TrimPrefix(s, "0x"), "0X")
			if h != s && h != "" {
				if u, err := strconv.ParseUint(h, 16, 64); err == nil {
					L.Push(lua.LNumber(u))
					return 1
				}
			}
		} else if u, err := strconv.ParseUint(strings.ToLower(s), base, 64); err == nil {
			L.Push(lua.LNumber(u))
			return 1
		}
	}
	L.Push(lua.LNil)
	return 1
}

// compile returns the script's compiled function, once per source in
// the process: a simulator starts servers by the thousand, and parsing
// each script again on each was a twentieth of its CPU. A compiled
// function is only read once built, so every engine can share it.
func (e *engine) compile(src string) (*lua.FunctionProto, error) {
	if p, ok := protos.Load(src); ok {
		return p.(*lua.FunctionProto), nil
	}
	chunk, err := parse.Parse(strings.NewReader(src), "user_script")
	if err != nil {
		return nil, Error("ERR Error compiling script (new function): user_script: " + firstLine(err.Error()))
	}
	p, err := lua.Compile(chunk, "user_script")
	if err != nil {
		return nil, Error("ERR Error compiling script (new function): user_script: " + firstLine(err.Error()))
	}
	protos.Store(src, p)
	return p, nil
}

var protos sync.Map // script source → its compiled function

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// run runs src with keys and args and converts what it returns into a
// reply (luaReplyToRedisReply).
func (e *engine) run(src string, keys, args []string) any {
	p, err := e.compile(src)
	if err != nil {
		return err
	}
	L := e.L
	g := L.G.Global
	g.RawSetString("KEYS", strTable(L, keys))
	g.RawSetString("ARGV", strTable(L, args))
	L.Push(L.NewFunctionFromProto(p))
	if err := L.PCall(0, 1, nil); err != nil {
		L.SetTop(0)
		return scriptError(err, Sha1(src))
	}
	ret := L.Get(-1)
	L.SetTop(0)
	return toReply(ret)
}

func strTable(L *lua.LState, ss []string) *lua.LTable {
	t := L.CreateTable(len(ss), 0)
	for _, s := range ss {
		t.Append(lua.LString(s))
	}
	return t
}

// scriptError is the reply to a script that raised an error: an error
// table's message ({err = …}, what redis.call raises), or "ERR " and
// Lua's message, each with where the script failed, as Redis 7.0 words it.
func scriptError(err error, sha string) Error {
	msg := err.Error()
	line := "?"
	if ae, ok := err.(*lua.ApiError); ok {
		if t, ok := ae.Object.(*lua.LTable); ok {
			if s, ok := t.RawGetString("err").(lua.LString); ok {
				msg = string(s)
			}
		} else {
			msg = "ERR " + firstLine(ae.Object.String())
		}
		if i := strings.Index(ae.StackTrace, "user_script:"); i >= 0 {
			rest := ae.StackTrace[i+len("user_script:"):]
			if j := strings.IndexByte(rest, ':'); j > 0 {
				line = rest[:j]
			}
		}
	}
	return Error(fmt.Sprintf("%s script: %s, on @user_script:%s.", msg, sha, line))
}

// toReply converts a script's return value as Redis does: a string is a
// bulk, a number an integer (truncated), true 1, false and nil a nil bulk,
// a table with err or ok an error or status, any other table the array of
// its elements up to the first nil. (On a RESP3 connection too: booleans
// follow the script's redis.setresp, 2 unless it says otherwise, which
// lockstore's scripts never do.)
func toReply(v lua.LValue) any {
	switch x := v.(type) {
	case lua.LString:
		return string(x)
	case lua.LNumber:
		return int64(float64(x)) // C's (long long) cast truncates
	case lua.LBool:
		if x {
			return int64(1)
		}
		return nil
	case *lua.LTable:
		if s, ok := x.RawGetString("err").(lua.LString); ok {
			// Redis 7.0 reads the first word as the error's code; a
			// message of one word has none, and gets "ERR" in front.
			msg := strings.TrimPrefix(string(s), "-")
			if !strings.Contains(msg, " ") {
				msg = "ERR " + msg
			}
			return Error(msg)
		}
		if s, ok := x.RawGetString("ok").(lua.LString); ok {
			return status(s)
		}
		out := []any{}
		for i := 1; ; i++ {
			el := x.RawGetInt(i)
			if el == lua.LNil {
				break
			}
			out = append(out, toReply(el))
		}
		return out
	}
	return nil
}

// toLua converts a reply into what redis.call returns to a script.
func toLua(L *lua.LState, r any) lua.LValue {
	switch x := r.(type) {
	case int64:
		return lua.LNumber(x)
	case string:
		return lua.LString(x)
	case nil:
		return lua.LFalse
	case status:
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(x))
		return t
	case Error:
		t := L.NewTable()
		t.RawSetString("err", lua.LString(x))
		return t
	case []any:
		t := L.CreateTable(len(x), 0)
		for _, el := range x {
			t.Append(toLua(L, el))
		}
		return t
	}
	panic(fmt.Sprintf("luaredis: reply %T", r))
}

// call is redis.call (raise true) and redis.pcall.
func (e *engine) call(L *lua.LState, raise bool) int {
	n := L.GetTop()
	fail := func(msg string) int {
		t := L.NewTable()
		t.RawSetString("err", lua.LString(msg))
		if raise {
			L.Error(t, 0)
		}
		L.Push(t)
		return 1
	}
	if n == 0 {
		return fail("ERR Please specify at least one argument for this redis lib call")
	}
	argv := make([]string, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			argv[i-1] = string(v)
		case lua.LNumber:
			// Redis 7.0 turns a Lua number into "%.17g", not Lua's %.14g.
			argv[i-1] = formatG17(float64(v))
		default:
			return fail("ERR Lua redis lib command arguments must be strings or integers")
		}
	}
	if c, ok := commands[strings.ToUpper(argv[0])]; !ok || c.noScript {
		if !ok {
			return fail("ERR Unknown Redis command called from script")
		}
		return fail("ERR This Redis command is not allowed from script")
	} else if (c.arity > 0 && n != c.arity) || (c.arity < 0 && n < -c.arity) {
		return fail("ERR Wrong number of args calling Redis command from script")
	}
	r := e.s.command(argv, true)
	if err, ok := r.(Error); ok {
		return fail(string(err))
	}
	L.Push(toLua(L, r))
	return 1
}
