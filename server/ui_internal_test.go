package server

import (
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The dashboard is on by default only where nobody but this machine can
// reach it.
func TestUIDefault(t *testing.T) {
	for _, tc := range []struct {
		env  map[string]string
		want bool
	}{
		{map[string]string{}, true}, // 127.0.0.1:8080, the default
		{map[string]string{"LOCKGW_ADDR": ":8080", "LOCKGW_ALLOW_UNAUTHENTICATED": "true"}, false}, // every interface
		{map[string]string{"LOCKGW_ADDR": "127.0.0.1:8080"}, true},
		{map[string]string{"LOCKGW_ADDR": "[::1]:8080"}, true},
		{map[string]string{"LOCKGW_ADDR": "10.0.0.5:8080", "LOCKGW_ALLOW_UNAUTHENTICATED": "true"}, false},
		{map[string]string{"LOCKGW_UI": "true"}, true},
		{map[string]string{"LOCKGW_ADDR": "127.0.0.1:8080", "LOCKGW_UI": "false"}, false},
	} {
		c, err := parseConfig(nil, func(k string) string { return tc.env[k] }, io.Discard)
		require.NoError(t, err)
		assert.Equal(t, tc.want, c.UI, "%v", tc.env)
	}
	_, err := parseConfig([]string{"--ui=maybe"}, func(string) string { return "" }, io.Discard)
	assert.ErrorContains(t, err, "--ui")
}
