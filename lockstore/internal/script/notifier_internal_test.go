package script

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestTurn(t *testing.T) {
	for payload, want := range map[string]struct {
		id     string
		ms     int64
		holder string
	}{
		"gw.abc":            {"gw.abc", 0, ""},
		"gw.abc>1500>d1234": {"gw.abc", 1500, "d1234"},
		"gw.abc>1500":       {"gw.abc", 1500, ""},
		"gw.abc>0>d1234":    {"gw.abc", 0, ""},
		"gw.abc>x>d1234":    {"gw.abc", 0, ""},
		"*":                 {"*", 0, ""},
		"!acquired":         {"!acquired", 0, ""},
	} {
		id, ms, holder := Turn(payload)
		assert.Equal(t, want.id, id, payload)
		assert.Equal(t, want.ms, ms, payload)
		assert.Equal(t, want.holder, holder, payload)
	}
}
