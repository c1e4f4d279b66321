package chaos

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestReportExtraCounts: a checker beyond the table's columns shows in the
// verdict, always when the row names it, else when it found something.
func TestReportExtraCounts(t *testing.T) {
	var r Report
	r.Add("holds", "redis", nil, 10, nil, false, "lost-late")
	r.Add("holds-slow-stream", "redis", []string{"lost-late"}, 10, []Violation{{Checker: "lost-late"}, {Checker: "lost-late"}}, false, "lost-late")
	r.Add("semaphore-control", "redlock", []string{"permits"}, 10, []Violation{{Checker: "permits"}}, false)
	r.Add("contention", "redis", nil, 10, nil, false)
	lines := strings.Split(strings.TrimSpace(r.Table()), "\n")
	assert.Len(t, lines, 6)
	assert.True(t, strings.HasSuffix(lines[2], "| pass; lost-late 0 |"), lines[2])
	assert.True(t, strings.HasSuffix(lines[3], "| pass (caught); lost-late 2 |"), lines[3])
	assert.True(t, strings.HasSuffix(lines[4], "| pass (caught); permits 1 |"), lines[4])
	assert.True(t, strings.HasSuffix(lines[5], "| 0 | 0 | 0 | 0 | 0 | pass |"), lines[5])
}
