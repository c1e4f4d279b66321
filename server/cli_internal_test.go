package server

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSwitchesStandAlone: a switch given alone means true, as a Go bool flag
// does; =false and its variable still work, and a value after a space is
// refused with a message that shows the = form.
func TestSwitchesStandAlone(t *testing.T) {
	noEnv := func(string) string { return "" }
	c, err := parseConfig([]string{"--addr", "127.0.0.1:0", "--pprof", "--rate-limit-shadow", "--ui"}, noEnv, io.Discard)
	require.NoError(t, err)
	assert.True(t, c.PProf)
	assert.True(t, c.RateLimitShadow)
	assert.True(t, c.UI)

	c, err = parseConfig([]string{"--addr", "127.0.0.1:0", "--pprof=false", "--ui=false"}, func(k string) string {
		return map[string]string{"LOCKGW_PPROF": "true", "LOCKGW_RATE_LIMIT_SHADOW": "true"}[k]
	}, io.Discard)
	require.NoError(t, err)
	assert.False(t, c.PProf, "the flag wins over the variable")
	assert.False(t, c.UI)
	assert.True(t, c.RateLimitShadow, "from LOCKGW_RATE_LIMIT_SHADOW")

	_, err = parseConfig([]string{"--pprof", "false"}, noEnv, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--pprof=false")

	for _, s := range settings {
		if s.def == "true" || s.def == "false" {
			assert.True(t, switches[s.name], "--%s is true or false: list it in switches so that it stands alone", s.name)
		}
	}
}

func TestHelpAndVersionAreNotErrors(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"-help"}, {"--addr", "x", "--help"}} {
		_, err := parseConfig(args, func(string) string { return "" }, io.Discard)
		assert.ErrorIs(t, err, errHelp, "%v", args)
	}
	_, err := parseConfig([]string{"--version"}, func(string) string { return "" }, io.Discard)
	assert.ErrorIs(t, err, errVersion)
	_, err = parseConfig([]string{"--nonsense"}, func(string) string { return "" }, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "lockgateway --help")
}
