package luaredis

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The replies below were read from redis-server 7.0.15; lockstore's
// differential test compares far more against a live one.

// eval2 runs a script on a RESP2 connection.
func eval2(s *Server, src string) (any, error) { return s.Do("EVAL", src, 0) }

func TestConversions(t *testing.T) {
	s := New()
	s.SetTime(1_700_000_000_123_456)
	r, err := eval2(s, `redis.call('SET','a', 1e15); redis.call('SET','b', 0.1); redis.call('SET','c', 1712345678901234)
return {redis.call('GET','a'), redis.call('GET','b'), redis.call('GET','c'), tostring(1712345678901234), 3.9, -3.9,
  tonumber('1e3'), tostring(tonumber(' 12 ')), true, false, 7}`)
	require.NoError(t, err)
	assert.Equal(t, []any{"1000000000000000", "0.10000000000000001", "1712345678901234", "1.7123456789012e+15",
		int64(3), int64(-3), int64(1000), "12", int64(1), nil, int64(7)}, r)

	r, err = eval2(s, `return {ok='fine'}`)
	require.NoError(t, err)
	assert.Equal(t, "fine", r)
	r, err = eval2(s, `return {1,2,nil,4}`)
	require.NoError(t, err)
	assert.Equal(t, []any{int64(1), int64(2)}, r)

	_, err = eval2(s, `return redis.pcall('HGET','a','x')`)
	assert.EqualError(t, err, "WRONGTYPE Operation against a key holding the wrong kind of value")
	_, err = eval2(s, `return redis.call('HGET','a','x')`)
	assert.ErrorContains(t, err, "WRONGTYPE Operation against a key holding the wrong kind of value script: ")
	_, err = eval2(s, `return x`)
	assert.ErrorContains(t, err, "ERR user_script:1: Script attempted to access nonexistent global variable 'x'")
	_, err = eval2(s, `x = 1`)
	assert.ErrorContains(t, err, "Attempt to modify a readonly table")
	_, err = eval2(s, `return redis.call('SET','k','v','PX',0)`)
	assert.ErrorContains(t, err, "ERR invalid expire time in 'set' command script:")
	r, err = eval2(s, `return redis.call('TIME')`)
	require.NoError(t, err)
	assert.Equal(t, []any{"1700000000", "123456"}, r)
}

func TestExpiry(t *testing.T) {
	s := New()
	s.SetTime(1_000_000_000) // 1 000 000 ms
	_, err := s.Do("SET", "k", "v", "PX", 10)
	require.NoError(t, err)
	r, _ := s.Do("PEXPIRETIME", "k")
	assert.Equal(t, int64(1_000_010), r)
	s.SetTime(1_000_010_999) // ms 1 000 010: not past the expiry yet
	r, _ = s.Do("PTTL", "k")
	assert.Equal(t, int64(0), r)
	s.SetTime(1_000_011_000)
	r, _ = s.Do("GET", "k")
	assert.Nil(t, r)
	_, _ = s.Do("SET", "k", "v")
	r, _ = s.Do("PEXPIRE", "k", -1) // not in the future: deleted
	assert.Equal(t, int64(1), r)
	r, _ = s.Do("EXISTS", "k")
	assert.Equal(t, int64(0), r)
}

func TestEvalShaAfterFlush(t *testing.T) {
	s := New()
	sha := s.Load("return 1")
	r, err := s.EvalSha(sha, nil)
	require.NoError(t, err)
	assert.Equal(t, int64(1), r)
	s.FlushAll()
	_, err = s.EvalSha(sha, nil)
	assert.ErrorContains(t, err, "NOSCRIPT")
}
