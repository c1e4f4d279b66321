package server

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSettingsDocumented: the configuration table in the docs has one row
// per setting, in any order, with the flag, variable and default the code
// has; a setting added, renamed or given a new default fails here until the
// docs say so.
func TestSettingsDocumented(t *testing.T) {
	const header = "| env | flag | default | meaning |"
	files, err := filepath.Glob("../docs/*.md")
	require.NoError(t, err)
	var doc, name string
	for _, f := range append([]string{"../README.md"}, files...) {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		if strings.Contains(string(b), header) {
			doc, name = string(b), f
			break
		}
	}
	require.NotEmpty(t, doc, "no docs page has the configuration table (%q)", header)

	row := regexp.MustCompile("^\\| `(LOCKGW_[A-Z_]+)` \\| `--([a-z-]+)` \\| ([^|]+) \\|")
	documented := map[string][2]string{} // env → flag, default cell
	table := doc[strings.Index(doc, header):]
	for line := range strings.Lines(table) {
		if !strings.HasPrefix(line, "|") {
			break
		}
		if m := row.FindStringSubmatch(line); m != nil {
			documented[m[1]] = [2]string{m[2], strings.TrimSpace(m[3])}
		}
	}
	for _, s := range settings {
		d, ok := documented[s.env()]
		if !assert.True(t, ok, "%s: no row for %s", name, s.env()) {
			continue
		}
		delete(documented, s.env())
		assert.Equal(t, s.name, d[0], "%s: the flag of %s", name, s.env())
		want := "`" + s.def + "`"
		if s.def == "" {
			want = "(none)"
		}
		assert.True(t, strings.HasPrefix(d[1], want), "%s: %s's default is %s in the code, %s in the docs", name, s.env(), want, d[1])
	}
	assert.Empty(t, documented, "%s documents settings the gateway does not have", name)
}
