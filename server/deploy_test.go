package server_test

import (
	"encoding/json"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// The metrics deploy/ queries: the Grafana dashboard and the Prometheus
// rules. Metric names are ours (lockgw_…) or the Go client's process and
// runtime ones; recording rules (lockgw:…) are checked against the rules
// that define them.
const (
	dashboardFile = "../deploy/grafana/lockgateway.json"
	rulesFile     = "../deploy/prometheus/rules.yml"
)

var metricName = regexp.MustCompile(`\b(?:lockgw|process|go)_[a-z0-9_]+\b`)

// dashboardExprs is every PromQL expression in the dashboard: its panels'
// targets and its variables' queries.
func dashboardExprs(t *testing.T, text []byte) []string {
	t.Helper()
	var doc any
	require.NoError(t, json.Unmarshal(text, &doc), dashboardFile)
	var exprs []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, c := range v {
				walk(c, k)
			}
		case []any:
			for _, c := range v {
				walk(c, key)
			}
		case string:
			if key == "expr" || key == "definition" {
				exprs = append(exprs, v)
			}
		}
	}
	walk(doc, "")
	require.NotEmpty(t, exprs, "no expressions found in %s", dashboardFile)
	return exprs
}

type ruleFile struct {
	Groups []struct {
		Rules []struct {
			Record string `yaml:"record"`
			Alert  string `yaml:"alert"`
			Expr   string `yaml:"expr"`
		} `yaml:"rules"`
	} `yaml:"groups"`
}

// ruleExprs is every rule's expression, and the recording rules' names.
func ruleExprs(t *testing.T, text []byte) (exprs []string, recorded map[string]bool) {
	t.Helper()
	var f ruleFile
	require.NoError(t, yaml.Unmarshal(text, &f), rulesFile)
	recorded = map[string]bool{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
			if r.Record != "" {
				recorded[r.Record] = true
			}
		}
	}
	require.NotEmpty(t, exprs, "no rules found in %s", rulesFile)
	return exprs, recorded
}

// exported is the set of series names an exposition offers: each metric,
// and a histogram's _bucket, _count and _sum.
func exported(t *testing.T, bodies ...string) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, body := range bodies {
		types, _ := exposition(t, body)
		for name, typ := range types {
			names[name] = true
			if typ == "histogram" || typ == "summary" {
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					names[name+suffix] = true
				}
			}
		}
	}
	return names
}

// missing lists the metric names exprs query that names lacks.
func missing(exprs []string, names map[string]bool) []string {
	var out []string
	for _, e := range exprs {
		for _, m := range metricName.FindAllString(e, -1) {
			if !names[m] && !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}

var recordingRef = regexp.MustCompile(`\blockgw:[a-z0-9_:]+`)

// TestDeployQueriesExist: every metric the dashboard and the alert rules
// query is in /metrics of a gateway over memory (which has semaphores)
// or over Redlock (its nodes' gauges), so renaming a metric breaks this
// test, not an operator's alerting. The controls show that the check
// fails on a rename, from either side.
func TestDeployQueriesExist(t *testing.T) {
	t.Parallel()
	_, memBody := scrape(t, apitest.NewClient(apitest.Start(t, nil).URL))
	_, env := redlockEnv(t, 3)
	_, rlBody := scrape(t, apitest.NewClient(apitest.Start(t, env).URL))
	names := exported(t, memBody, rlBody)

	dash, err := os.ReadFile(dashboardFile)
	require.NoError(t, err)
	rules, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	dashExprs := dashboardExprs(t, dash)
	ruleExprs, recorded := ruleExprs(t, rules)
	all := append(slices.Clone(dashExprs), ruleExprs...)

	queried := map[string]bool{}
	for _, e := range all {
		for _, m := range metricName.FindAllString(e, -1) {
			queried[m] = true
		}
	}
	t.Logf("%d expressions query %d metrics: %s", len(all), len(queried), strings.Join(slices.Sorted(maps.Keys(queried)), " "))
	assert.Empty(t, missing(dashExprs, names), "the dashboard queries metrics the gateway does not export")
	assert.Empty(t, missing(ruleExprs, names), "the rules query metrics the gateway does not export")
	for _, e := range all {
		for _, r := range recordingRef.FindAllString(e, -1) {
			assert.True(t, recorded[r], "%s is used but no rule records it", r)
		}
	}
	// What operators must see is there: lost leases, in both.
	assert.Contains(t, string(dash), "lockgw_lock_gone_total")
	assert.Contains(t, string(rules), "lockgw_lock_gone_total")

	t.Run("control: a metric renamed in the dashboard", func(t *testing.T) {
		renamed := strings.ReplaceAll(string(dash), "lockgw_lock_gone_total", "lockgw_lock_lost_total")
		assert.Equal(t, []string{"lockgw_lock_lost_total"}, missing(dashboardExprs(t, []byte(renamed)), names))
	})
	t.Run("control: a metric renamed in the gateway", func(t *testing.T) {
		for _, rename := range [][2]string{
			{"lockgw_waiting_max", "lockgw_max_waiting"},
			{"lockgw_redlock_node_quarantined", "lockgw_redlock_quarantined"},
			{"lockgw_http_request_duration_seconds", "lockgw_request_duration_seconds"}, // a histogram
		} {
			renamed := exported(t,
				strings.ReplaceAll(memBody, rename[0], rename[1]),
				strings.ReplaceAll(rlBody, rename[0], rename[1]))
			assert.NotEmpty(t, missing(dashExprs, renamed), "dashboard, %s renamed", rename[0])
			assert.NotEmpty(t, missing(ruleExprs, renamed), "rules, %s renamed", rename[0])
			for _, m := range append(missing(dashExprs, renamed), missing(ruleExprs, renamed)...) {
				assert.True(t, strings.HasPrefix(m, rename[0]), "only the renamed metric is missing, not %s", m)
			}
		}
	})
}
