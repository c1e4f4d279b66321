package luaredis

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// command is one Redis command: its arity as Redis counts it (the name
// included; negative: at least that many) and what it does with its
// arguments (the name excluded).
type command struct {
	arity    int
	noScript bool
	run      func(s *Server, a []string) any
}

var commands map[string]command

func init() {
	commands = map[string]command{
		"GET":              {2, false, cmdGet},
		"SET":              {-3, false, cmdSet},
		"DEL":              {-2, false, cmdDel},
		"EXISTS":           {-2, false, cmdExists},
		"TYPE":             {2, false, cmdType},
		"KEYS":             {2, false, cmdKeys},
		"PEXPIRE":          {-3, false, func(s *Server, a []string) any { return s.expire(a, false) }},
		"PEXPIREAT":        {-3, false, func(s *Server, a []string) any { return s.expire(a, true) }},
		"PEXPIRETIME":      {2, false, cmdPexpiretime},
		"PTTL":             {2, false, cmdPttl},
		"TIME":             {1, false, cmdTime},
		"INFO":             {-1, false, cmdInfo},
		"HGET":             {3, false, cmdHget},
		"HSET":             {-4, false, cmdHset},
		"HDEL":             {-3, false, cmdHdel},
		"HEXISTS":          {3, false, cmdHexists},
		"HINCRBY":          {4, false, cmdHincrby},
		"HGETALL":          {2, false, cmdHgetall},
		"ZADD":             {-4, false, cmdZadd},
		"ZREM":             {-3, false, cmdZrem},
		"ZRANGE":           {-4, false, cmdZrange},
		"ZRANGEBYSCORE":    {-4, false, cmdZrangebyscore},
		"ZREMRANGEBYSCORE": {4, false, cmdZremrangebyscore},
		"ZCOUNT":           {4, false, cmdZcount},
		"ZCARD":            {2, false, cmdZcard},
		"ZSCORE":           {3, false, cmdZscore},
		"ZRANK":            {3, false, cmdZrank},
		"PUBLISH":          {3, false, func(s *Server, a []string) any { return s.publish("PUBLISH", a) }},
		"SPUBLISH":         {3, false, func(s *Server, a []string) any { return s.publish("SPUBLISH", a) }},
		"FLUSHALL":         {-1, true, func(s *Server, _ []string) any { s.keys = map[string]*entry{}; return status("OK") }},
		"SCRIPT":           {-2, true, cmdScript},
		"EVAL":             {-3, true, func(s *Server, a []string) any { return s.eval(a, false) }},
		"EVALSHA":          {-3, true, func(s *Server, a []string) any { return s.eval(a, true) }},
	}
}

var (
	errSyntax     = Error("ERR syntax error")
	errNotInteger = Error("ERR value is not an integer or out of range")
	errNotFloat   = Error("ERR value is not a valid float")
	errMinMax     = Error("ERR min or max is not a float")
)

// parseInt parses as Redis's string2ll: an optional '-', digits, no
// leading zeros, no spaces, within int64.
func parseInt(s string) (int64, bool) {
	if s == "" || len(s) > 20 {
		return 0, false
	}
	d := s
	if d[0] == '-' {
		d = d[1:]
	}
	if d == "" || (d[0] == '0' && len(d) > 1) {
		return 0, false
	}
	for _, c := range d {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	if d == "0" && s != "0" { // "-0"
		return 0, false
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v, err == nil
}

// parseFloat parses as Redis's string2d (strtod, the whole string, no
// leading space, no NaN).
func parseFloat(s string) (float64, bool) {
	if s == "" || strings.ContainsAny(s[:1], " \t\n\r\v\f") || strings.Contains(s, "_") {
		return 0, false
	}
	v, err := strtod(s) // ERANGE (overflow, underflow) is an error too
	if err != nil {
		return 0, false
	}
	if math.IsNaN(v) {
		return 0, false
	}
	return v, true
}

// strtod is strconv.ParseFloat, but reading hexadecimal without a "p"
// exponent as C's strtod does ("0x10" is 16).
func strtod(s string) (float64, error) {
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		u := strings.ToLower(strings.TrimLeft(s, "+-"))
		if strings.HasPrefix(u, "0x") && !strings.Contains(u, "p") {
			return strconv.ParseFloat(s+"p0", 64)
		}
	}
	return f, err
}

// formatScore is how Redis 7.0 replies a double (RESP2): "%.17g", and
// "inf"/"-inf".
func formatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return fmt.Sprintf("%.17g", f)
}

func cmdGet(s *Server, a []string) any {
	e, err := s.typed(a[0], kindString)
	if err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	return e.str
}

func cmdSet(s *Server, a []string) any {
	key, val := a[0], a[1]
	var nx, xx, keep bool
	unit, amount := "", "" // the expiry option and its argument
	for i := 2; i < len(a); i++ {
		o := strings.ToUpper(a[i])
		switch {
		case o == "NX" && !xx:
			nx = true
		case o == "XX" && !nx:
			xx = true
		case o == "KEEPTTL" && unit == "":
			keep = true
		case (o == "PX" || o == "EX") && !keep && unit == "" && i+1 < len(a):
			unit, amount = o, a[i+1]
			i++
		default:
			return errSyntax
		}
	}
	expiry := int64(noExpiry)
	if unit != "" {
		n, ok := parseInt(amount)
		if !ok {
			return errNotInteger
		}
		if n <= 0 || (unit == "EX" && n > math.MaxInt64/1000) {
			return Error("ERR invalid expire time in 'set' command")
		}
		if unit == "EX" {
			n *= 1000
		}
		expiry = s.nowMs() + n
	}
	old := s.lookup(key)
	if (nx && old != nil) || (xx && old == nil) {
		return nil
	}
	e := &entry{kind: kindString, str: val, expiry: expiry}
	if keep && old != nil {
		e.expiry = old.expiry
	}
	s.keys[key] = e
	return status("OK")
}

func cmdDel(s *Server, a []string) any {
	n := int64(0)
	for _, k := range a {
		if s.lookup(k) != nil {
			delete(s.keys, k)
			n++
		}
	}
	return n
}

func cmdExists(s *Server, a []string) any {
	n := int64(0)
	for _, k := range a {
		if s.lookup(k) != nil {
			n++
		}
	}
	return n
}

func cmdType(s *Server, a []string) any {
	e := s.lookup(a[0])
	if e == nil {
		return status("none")
	}
	return status(e.kind.String())
}

func cmdKeys(s *Server, a []string) any {
	if a[0] != "*" {
		return Error("ERR luaredis: KEYS supports only *")
	}
	out := []any{}
	for _, k := range s.sortedKeys() {
		if e := s.keys[k]; e.expiry == noExpiry || s.nowMs() <= e.expiry { // as Redis: checks, deletes nothing
			out = append(out, k)
		}
	}
	return out
}

// expire is PEXPIRE (at false: ms from now) and PEXPIREAT (Unix ms), with
// Redis 7's NX, XX, GT and LT. An expiry that is not in the future deletes
// the key, as Redis does.
func (s *Server) expire(a []string, at bool) any {
	var nx, xx, gt, lt bool
	for _, o := range a[2:] {
		switch strings.ToUpper(o) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		default:
			return Error("ERR Unsupported option " + o)
		}
	}
	if nx && (xx || gt || lt) {
		return Error("ERR NX and XX, GT or LT options at the same time are not compatible")
	}
	if gt && lt {
		return Error("ERR GT and LT options at the same time are not compatible")
	}
	n, ok := parseInt(a[1])
	if !ok {
		return errNotInteger
	}
	when := n
	if !at {
		if n > math.MaxInt64-s.nowMs() {
			return Error("ERR invalid expire time in 'pexpire' command")
		}
		when += s.nowMs()
	}
	e := s.lookup(a[0])
	if e == nil {
		return int64(0)
	}
	cur := e.expiry
	if (nx && cur != noExpiry) || (xx && cur == noExpiry) || (gt && (cur == noExpiry || when <= cur)) || (lt && cur != noExpiry && when >= cur) {
		return int64(0)
	}
	if when <= s.nowMs() {
		delete(s.keys, a[0])
		return int64(1)
	}
	e.expiry = when
	return int64(1)
}

func cmdPexpiretime(s *Server, a []string) any {
	e := s.lookup(a[0])
	switch {
	case e == nil:
		return int64(-2)
	case e.expiry == noExpiry:
		return int64(-1)
	}
	return e.expiry
}

func cmdPttl(s *Server, a []string) any {
	e := s.lookup(a[0])
	switch {
	case e == nil:
		return int64(-2)
	case e.expiry == noExpiry:
		return int64(-1)
	}
	return max(e.expiry-s.nowMs(), 0)
}

func cmdTime(s *Server, _ []string) any {
	sec := floorDiv(s.nowUs, 1000000)
	return []any{strconv.FormatInt(sec, 10), strconv.FormatInt(s.nowUs-sec*1000000, 10)}
}

// cmdInfo is INFO's "server" section, of which luaredis has the run id
// only; any section asked for gets it.
func cmdInfo(s *Server, _ []string) any {
	return "# Server\r\nredis_version:7.0.15\r\nrun_id:" + s.RunID + "\r\n"
}

func cmdHget(s *Server, a []string) any {
	e, err := s.typed(a[0], kindHash)
	if err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	v, ok := e.hash[a[1]]
	if !ok {
		return nil
	}
	return v
}

func cmdHset(s *Server, a []string) any {
	if len(a)%2 != 1 {
		return Error("ERR wrong number of arguments for 'hset' command")
	}
	e, err := s.typed(a[0], kindHash)
	if err != nil {
		return err
	}
	if e == nil {
		e = &entry{kind: kindHash, hash: map[string]string{}, expiry: noExpiry}
		s.keys[a[0]] = e
	}
	n := int64(0)
	for i := 1; i < len(a); i += 2 {
		if _, ok := e.hash[a[i]]; !ok {
			n++
		}
		e.hash[a[i]] = a[i+1]
	}
	return n
}

func cmdHdel(s *Server, a []string) any {
	e, err := s.typed(a[0], kindHash)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	n := int64(0)
	for _, f := range a[1:] {
		if _, ok := e.hash[f]; ok {
			delete(e.hash, f)
			n++
		}
	}
	if len(e.hash) == 0 {
		delete(s.keys, a[0])
	}
	return n
}

func cmdHexists(s *Server, a []string) any {
	e, err := s.typed(a[0], kindHash)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	if _, ok := e.hash[a[1]]; ok {
		return int64(1)
	}
	return int64(0)
}

func cmdHincrby(s *Server, a []string) any {
	incr, ok := parseInt(a[2])
	if !ok {
		return errNotInteger
	}
	e, err := s.typed(a[0], kindHash)
	if err != nil {
		return err
	}
	cur := int64(0)
	if e != nil {
		if v, ok := e.hash[a[1]]; ok {
			if cur, ok = parseInt(v); !ok {
				return Error("ERR hash value is not an integer")
			}
		}
	}
	if (incr < 0 && cur < 0 && incr < math.MinInt64-cur) || (incr > 0 && cur > 0 && incr > math.MaxInt64-cur) {
		return Error("ERR increment or decrement would overflow")
	}
	if e == nil {
		e = &entry{kind: kindHash, hash: map[string]string{}, expiry: noExpiry}
		s.keys[a[0]] = e
	}
	cur += incr
	e.hash[a[1]] = strconv.FormatInt(cur, 10)
	return cur
}

func cmdHgetall(s *Server, a []string) any {
	e, err := s.typed(a[0], kindHash)
	if err != nil {
		return err
	}
	out := []any{}
	if e == nil {
		return out
	}
	fs := make([]string, 0, len(e.hash))
	for f := range e.hash {
		fs = append(fs, f)
	}
	sort.Strings(fs)
	for _, f := range fs {
		out = append(out, f, e.hash[f])
	}
	return out
}

// member is a sorted set element; sets sort by score, then member bytes.
type member struct {
	name  string
	score float64
}

func sorted(z map[string]float64) []member {
	ms := make([]member, 0, len(z))
	for n, sc := range z {
		ms = append(ms, member{n, sc})
	}
	sort.Slice(ms, func(i, j int) bool {
		if ms[i].score != ms[j].score {
			return ms[i].score < ms[j].score
		}
		return ms[i].name < ms[j].name
	})
	return ms
}

func cmdZadd(s *Server, a []string) any {
	var nx, xx, gt, lt, ch bool
	i := 1
flags:
	for ; i < len(a); i++ {
		switch strings.ToUpper(a[i]) {
		case "NX":
			nx = true
		case "XX":
			xx = true
		case "GT":
			gt = true
		case "LT":
			lt = true
		case "CH":
			ch = true
		case "INCR":
			return Error("ERR luaredis: ZADD INCR is not supported")
		default:
			break flags
		}
	}
	pairs := a[i:]
	if len(pairs) == 0 || len(pairs)%2 != 0 {
		return errSyntax
	}
	if nx && xx {
		return Error("ERR XX and NX options at the same time are not compatible")
	}
	if (gt && nx) || (lt && nx) || (gt && lt) {
		return Error("ERR GT, LT, and/or NX options at the same time are not compatible")
	}
	scores := make([]float64, len(pairs)/2)
	for j := range scores {
		f, ok := parseFloat(pairs[2*j])
		if !ok {
			return errNotFloat
		}
		scores[j] = f
	}
	e, err := s.typed(a[0], kindZset)
	if err != nil {
		return err
	}
	if e == nil {
		if xx {
			return int64(0)
		}
		e = &entry{kind: kindZset, zset: map[string]float64{}, expiry: noExpiry}
		s.keys[a[0]] = e
	}
	added, changed := int64(0), int64(0)
	for j, sc := range scores {
		m := pairs[2*j+1]
		cur, ok := e.zset[m]
		switch {
		case !ok:
			if xx {
				continue
			}
			e.zset[m] = sc
			added++
		case nx, gt && sc <= cur, lt && sc >= cur, sc == cur:
		default:
			e.zset[m] = sc
			changed++
		}
	}
	if len(e.zset) == 0 {
		delete(s.keys, a[0])
	}
	if ch {
		return added + changed
	}
	return added
}

func cmdZrem(s *Server, a []string) any {
	e, err := s.typed(a[0], kindZset)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	n := int64(0)
	for _, m := range a[1:] {
		if _, ok := e.zset[m]; ok {
			delete(e.zset, m)
			n++
		}
	}
	if len(e.zset) == 0 {
		delete(s.keys, a[0])
	}
	return n
}

func withScores(ms []member, scores bool) []any {
	out := []any{}
	for _, m := range ms {
		out = append(out, m.name)
		if scores {
			out = append(out, formatScore(m.score))
		}
	}
	return out
}

func cmdZrange(s *Server, a []string) any {
	start, ok1 := parseInt(a[1])
	stop, ok2 := parseInt(a[2])
	scores := false
	for _, o := range a[3:] {
		if strings.ToUpper(o) != "WITHSCORES" {
			return Error("ERR luaredis: ZRANGE supports only ranks and WITHSCORES")
		}
		scores = true
	}
	if !ok1 || !ok2 {
		return errNotInteger
	}
	e, err := s.typed(a[0], kindZset)
	if err != nil {
		return err
	}
	if e == nil {
		return []any{}
	}
	ms := sorted(e.zset)
	n := int64(len(ms))
	if start < 0 {
		start += n
	}
	if stop < 0 {
		stop += n
	}
	if start < 0 {
		start = 0
	}
	if start > stop || start >= n {
		return []any{}
	}
	if stop >= n {
		stop = n - 1
	}
	return withScores(ms[start:stop+1], scores)
}

// scoreRange is a ZRANGEBYSCORE min/max pair; "(" makes a bound exclusive.
type scoreRange struct {
	min, max     float64
	minEx, maxEx bool
}

// parseBound parses a score range bound as zslParseRange does: strtod
// on the whole rest, which skips leading spaces and reads "" as 0, and
// no NaN.
func parseBound(b string) (float64, bool, bool) {
	ex := false
	if strings.HasPrefix(b, "(") {
		ex, b = true, b[1:]
	}
	b = strings.TrimLeft(b, " \t\n\r\v\f")
	if b == "" {
		return 0, ex, true
	}
	if strings.Contains(b, "_") {
		return 0, ex, false
	}
	f, err := strtod(b)
	if err != nil {
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			return 0, ex, false
		}
	}
	return f, ex, !math.IsNaN(f)
}

func parseRange(lo, hi string) (scoreRange, error) {
	var r scoreRange
	var ok1, ok2 bool
	r.min, r.minEx, ok1 = parseBound(lo)
	r.max, r.maxEx, ok2 = parseBound(hi)
	if !ok1 || !ok2 {
		return r, errMinMax
	}
	return r, nil
}

func (r scoreRange) has(f float64) bool {
	if (r.minEx && f <= r.min) || (!r.minEx && f < r.min) {
		return false
	}
	if (r.maxEx && f >= r.max) || (!r.maxEx && f > r.max) {
		return false
	}
	return true
}

func (s *Server) inRange(key, lo, hi string) ([]member, *entry, error) {
	r, err := parseRange(lo, hi)
	if err != nil {
		return nil, nil, err
	}
	e, err := s.typed(key, kindZset)
	if err != nil || e == nil {
		return nil, nil, err
	}
	var out []member
	for _, m := range sorted(e.zset) {
		if r.has(m.score) {
			out = append(out, m)
		}
	}
	return out, e, nil
}

func cmdZrangebyscore(s *Server, a []string) any {
	scores := false
	offset, count := int64(0), int64(-1)
	for i := 3; i < len(a); i++ {
		switch strings.ToUpper(a[i]) {
		case "WITHSCORES":
			scores = true
		case "LIMIT":
			if i+2 >= len(a) {
				return errSyntax
			}
			var ok1, ok2 bool
			offset, ok1 = parseInt(a[i+1])
			count, ok2 = parseInt(a[i+2])
			if !ok1 || !ok2 {
				return errNotInteger
			}
			i += 2
		default:
			return errSyntax
		}
	}
	ms, _, err := s.inRange(a[0], a[1], a[2])
	if err != nil {
		return err
	}
	if offset < 0 {
		return []any{}
	}
	if offset >= int64(len(ms)) {
		ms = nil
	} else {
		ms = ms[offset:]
	}
	if count >= 0 && count < int64(len(ms)) {
		ms = ms[:count]
	}
	return withScores(ms, scores)
}

func cmdZremrangebyscore(s *Server, a []string) any {
	ms, e, err := s.inRange(a[0], a[1], a[2])
	if err != nil {
		return err
	}
	for _, m := range ms {
		delete(e.zset, m.name)
	}
	if e != nil && len(e.zset) == 0 {
		delete(s.keys, a[0])
	}
	return int64(len(ms))
}

func cmdZcount(s *Server, a []string) any {
	ms, _, err := s.inRange(a[0], a[1], a[2])
	if err != nil {
		return err
	}
	return int64(len(ms))
}

func cmdZcard(s *Server, a []string) any {
	e, err := s.typed(a[0], kindZset)
	if err != nil {
		return err
	}
	if e == nil {
		return int64(0)
	}
	return int64(len(e.zset))
}

func cmdZscore(s *Server, a []string) any {
	e, err := s.typed(a[0], kindZset)
	if err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	f, ok := e.zset[a[1]]
	if !ok {
		return nil
	}
	return formatScore(f)
}

func cmdZrank(s *Server, a []string) any {
	e, err := s.typed(a[0], kindZset)
	if err != nil {
		return err
	}
	if e == nil {
		return nil
	}
	if _, ok := e.zset[a[1]]; !ok {
		return nil
	}
	for i, m := range sorted(e.zset) {
		if m.name == a[1] {
			return int64(i)
		}
	}
	return nil
}

func (s *Server) publish(cmd string, a []string) any {
	if s.KeepMessages {
		s.Published = append(s.Published, Message{Command: cmd, Channel: a[0], Payload: a[1]})
	}
	return int64(0)
}

func cmdScript(s *Server, a []string) any {
	switch strings.ToUpper(a[0]) {
	case "LOAD":
		if len(a) != 2 {
			return Error("ERR wrong number of arguments for 'script|load' command")
		}
		if _, err := s.lua.compile(a[1]); err != nil {
			return err
		}
		return s.Load(a[1])
	case "FLUSH":
		s.scripts = map[string]string{}
		return status("OK")
	case "EXISTS":
		out := []any{}
		for _, sha := range a[1:] {
			_, ok := s.scripts[strings.ToLower(sha)]
			out = append(out, map[bool]int64{true: 1, false: 0}[ok])
		}
		return out
	}
	return Error("ERR luaredis: unknown SCRIPT subcommand")
}

// eval is EVAL (bySha false: a[0] is the source) and EVALSHA.
func (s *Server) eval(a []string, bySha bool) any {
	n, ok := parseInt(a[1])
	if !ok {
		return errNotInteger
	}
	if n < 0 {
		return Error("ERR Number of keys can't be negative")
	}
	if n > int64(len(a)-2) {
		return Error("ERR Number of keys can't be greater than number of args")
	}
	src := a[0]
	if bySha {
		var found bool
		if src, found = s.scripts[strings.ToLower(a[0])]; !found {
			return Error("NOSCRIPT No matching script. Please use EVAL.")
		}
	} else {
		if _, err := s.lua.compile(src); err != nil {
			return err
		}
		s.Load(src)
	}
	return s.lua.run(src, a[2:2+n], a[2+n:])
}

// formatGoFloat is how go-redis writes a float64 argument.
func formatGoFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
