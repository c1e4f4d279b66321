package redis

import (
	"testing"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
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
		got, ok := script.LocksKeyspace.Key(redisKey)
		assert.Equal(t, want, got, redisKey)
		assert.Equal(t, want != "", ok, redisKey)
	}
	sem := script.Keyspace{Tag: "sem#", Suffix: ":permits"}
	got, ok := sem.Key("lockgw:{sem#jobs/a}:permits")
	assert.True(t, ok)
	assert.Equal(t, "jobs/a", got)
	assert.Equal(t, "lockgw:{sem#jobs/*}:permits", sem.Match("jobs/"))
	assert.Equal(t, `lockgw:{a\*\?\[x\]\\*}:lock`, script.LocksKeyspace.Match(`a*?[x]\`), "a prefix matches itself only")
}
