package problem_test

import (
	"os"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/problem"
)

// TestCatalogueMatchesOpenAPI: openapi.yaml's table of problem types has
// one row per kind, with the same status and title, and no other rows.
func TestCatalogueMatchesOpenAPI(t *testing.T) {
	spec, err := os.ReadFile("../openapi.yaml")
	require.NoError(t, err)
	row := regexp.MustCompile("\\| `" + regexp.QuoteMeta(problem.Base) + "([a-z-]+)` \\| ([0-9]{3}) \\| ([^|]+?) \\|")
	documented := map[string][2]string{}
	for _, m := range row.FindAllStringSubmatch(string(spec), -1) {
		documented[m[1]] = [2]string{m[2], m[3]}
	}
	require.NotEmpty(t, documented, "openapi.yaml has no table of problem types")
	seen := map[string]bool{}
	for _, k := range problem.All {
		assert.False(t, seen[k.Slug], "%s is in the catalogue twice", k.Slug)
		seen[k.Slug] = true
		d, ok := documented[k.Slug]
		if !assert.True(t, ok, "openapi.yaml does not list %s", k.Slug) {
			continue
		}
		assert.Equal(t, strconv.Itoa(k.Status), d[0], "%s: status", k.Slug)
		assert.Equal(t, k.Title, d[1], "%s: title", k.Slug)
		delete(documented, k.Slug)
	}
	assert.Empty(t, documented, "openapi.yaml lists problem types the gateway does not have")
}
