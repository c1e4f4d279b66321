package server_test

import (
	"bufio"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// exposition reads a /metrics body into each metric's type and its
// samples' series (`lockgw_lock_gone_total{op="extend"}` → 0).
func exposition(t *testing.T, body string) (types map[string]string, samples map[string][]string) {
	t.Helper()
	types, samples = map[string]string{}, map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			types[f[2]] = f[3]
			continue
		}
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name := line[:strings.IndexAny(line, "{ ")]
		samples[name] = append(samples[name], line)
	}
	require.NotEmpty(t, types, "no metrics in:\n%s", body)
	return types, samples
}

// TestCountersExportedFromTheStart: on a fresh gateway every counter of
// ours is in /metrics, at 0, each series whose labels are known up front
// among them: an increase() alert then sees the first lost lease, the
// first refusal, the first quarantine.
func TestCountersExportedFromTheStart(t *testing.T) {
	t.Parallel()
	nodes, env := redlockEnv(t, 3)
	for name, env := range map[string]map[string]string{"memory": nil, "redlock": env} {
		t.Run(name, func(t *testing.T) {
			_, body := scrape(t, apitest.NewClient(apitest.Start(t, env).URL))
			types, samples := exposition(t, body)
			for metric, typ := range types {
				if !strings.HasPrefix(metric, "lockgw_") || typ != "counter" {
					continue
				}
				assert.NotEmpty(t, samples[metric], "counter %s is declared but has no series", metric)
				for _, s := range samples[metric] {
					assert.True(t, strings.HasSuffix(s, " 0"), "a fresh gateway's %s", s)
				}
			}
			want := []string{
				`lockgw_lock_gone_total{op="extend"} 0`,
				`lockgw_lock_gone_total{op="release"} 0`,
				`lockgw_backend_errors_total{op="release"} 0`,
				`lockgw_backend_refusals_total{op="acquire",reason="oom"} 0`,
				`lockgw_ratelimit_decisions_total{decision="refused"} 0`,
				`lockgw_waiting_refused_total 0`,
				`lockgw_conflicts_total 0`,
				`lockgw_connections_replaced_total 0`,
				`lockgw_permit_ops_total{op="release",outcome="gone"} 0`,
				`lockgw_wait_seconds_count{outcome="timed_out"} 0`,
			}
			if name == "redlock" {
				for _, n := range nodes {
					want = append(want,
						`lockgw_redlock_votes_total{node="`+n.Addr()+`",vote="quarantined"} 0`,
						`lockgw_redlock_votes_total{node="`+n.Addr()+`",vote="timeout"} 0`,
						`lockgw_redlock_node_quarantined{node="`+n.Addr()+`"} 0`,
					)
				}
				want = append(want, `lockgw_redlock_admission_limit 0`, `lockgw_redlock_admission_refused_total 0`)
				assert.Regexp(t, regexp.MustCompile(`(?m)^lockgw_redlock_node_up\{node="[^"]+"\} [01]$`), body)
			}
			for _, w := range want {
				assert.Contains(t, body, w+"\n")
			}
		})
	}
}
