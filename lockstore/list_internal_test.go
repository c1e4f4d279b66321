package lockstore

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestKeyspace(t *testing.T) {
	for redisKey, want := range map[string]string{
		"lockgw:{jobs/a}:lock":        "jobs/a",
		"lockgw:{jobs/a}:fence":       "",
		"lockgw:{jobs/a}:lockx":       "",
		"lockgw:{quota:u}:locks":      "",
		"lockgw:{}:lock":              "",
		"lockgw:{a}:x}:lock":          "",
		"lockgw:{sem#jobs/a}:permits": "",
		"lockgw:ready":                "",
	} {
		got, ok := locksKeyspace.key(redisKey)
		assert.Equal(t, want, got, redisKey)
		assert.Equal(t, want != "", ok, redisKey)
	}
	sem := keyspace{tag: "sem#", suffix: ":permits"}
	got, ok := sem.key("lockgw:{sem#jobs/a}:permits")
	assert.True(t, ok)
	assert.Equal(t, "jobs/a", got)
	assert.Equal(t, "lockgw:{sem#jobs/*}:permits", sem.match("jobs/"))
	assert.Equal(t, `lockgw:{a\*\?\[x\]\\*}:lock`, locksKeyspace.match(`a*?[x]\`), "a prefix matches itself only")
}

func TestSmallest(t *testing.T) {
	s := newSmallest(3)
	for _, k := range []string{"e", "b", "d", "b", "a", "f", "c"} {
		s.offer(k)
	}
	assert.Equal(t, []string{"a", "b", "c"}, s.keys)
	assert.True(t, s.full())
	keys, next := page([]string{"a", "b", "c"}, 2)
	assert.Equal(t, []string{"a", "b"}, keys)
	assert.Equal(t, "b", next)
	keys, next = page([]string{"a", "b"}, 2)
	assert.Equal(t, []string{"a", "b"}, keys)
	assert.Empty(t, next)
}
