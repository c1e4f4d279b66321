package chaos

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"
)

// Row is one scenario on one backend, summed over its runs.
type Row struct {
	Scenario string
	Backend  string
	// Expect lists the checkers a known-unsafe control must trip; empty for
	// a scenario that must stay clean.
	Expect     []string
	Runs       int
	Ops        int
	Violations map[string]int // by checker
	Failed     bool           // the scenario did not behave as expected
	// Extra names checkers the row runs beyond the table's columns
	// (Checkers): the verdict shows their counts.
	Extra []string
}

// Total is the row's violations over all checkers.
func (r *Row) Total() int {
	n := 0
	for _, v := range r.Violations {
		n += v
	}
	return n
}

// Report collects rows from the scenarios of a test binary.
type Report struct {
	mu   sync.Mutex
	rows []*Row
}

// Add merges one run into the row for its scenario and backend. extra
// names the checkers it ran beyond the table's columns.
func (r *Report) Add(scenario, backend string, expect []string, ops int, violations []Violation, failed bool, extra ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var row *Row
	for _, x := range r.rows {
		if x.Scenario == scenario && x.Backend == backend {
			row = x
		}
	}
	if row == nil {
		row = &Row{Scenario: scenario, Backend: backend, Expect: expect, Violations: map[string]int{}, Extra: extra}
		r.rows = append(r.rows, row)
	}
	row.Runs++
	row.Ops += ops
	for _, v := range violations {
		row.Violations[v.Checker]++
	}
	row.Failed = row.Failed || failed
}

// Rows returns the rows in the order they were first added.
func (r *Report) Rows() []Row {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Row, len(r.rows))
	for i, x := range r.rows {
		out[i] = *x
		out[i].Extra = slices.Clone(x.Extra)
		out[i].Violations = map[string]int{}
		for k, v := range x.Violations {
			out[i].Violations[k] = v
		}
	}
	return out
}

// Table renders the rows as a Markdown table: runs, operations and the
// violations each checker found.
func (r *Report) Table() string {
	var b strings.Builder
	b.WriteString("| scenario | backend | expected | runs | operations | overlap | linearizability | fences | counter | state | verdict |\n")
	b.WriteString("|---|---|---|--:|--:|--:|--:|--:|--:|--:|---|\n")
	for _, row := range r.Rows() {
		expect := "safe: 0 violations"
		if len(row.Expect) > 0 {
			expect = "unsafe: " + strings.Join(row.Expect, ", ")
		}
		verdict := "pass"
		switch {
		case row.Failed && len(row.Expect) > 0:
			verdict = "**FAIL** (not caught in every run: a checker missed it, or a run ended before its checkers; see the test log)"
		case row.Failed:
			verdict = "**FAIL**"
		case len(row.Expect) > 0:
			verdict = "pass (caught)"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d | %d |", row.Scenario, row.Backend, expect, row.Runs, row.Ops)
		for _, c := range Checkers {
			fmt.Fprintf(&b, " %d |", row.Violations[c])
		}
		fmt.Fprintf(&b, " %s |\n", verdict+row.extraCounts())
	}
	return b.String()
}

// extraCounts renders what the checkers beyond the table's columns found:
// the row's Extra ones always, any other when it found something (a
// semaphore row's permits), as "; lost-late 0".
func (row Row) extraCounts() string {
	names := slices.Clone(row.Extra)
	for _, c := range slices.Sorted(maps.Keys(row.Violations)) {
		if !slices.Contains(Checkers, c) && !slices.Contains(names, c) {
			names = append(names, c)
		}
	}
	if len(names) == 0 {
		return ""
	}
	parts := make([]string, len(names))
	for i, c := range names {
		parts[i] = fmt.Sprintf("%s %d", c, row.Violations[c])
	}
	return "; " + strings.Join(parts, ", ")
}

// Machine describes where a run happened, for docs/chaos-report.md.
func Machine() string {
	var parts []string
	if out, err := exec.Command("uname", "-srm").Output(); err == nil {
		parts = append(parts, strings.TrimSpace(string(out)))
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(b)) {
			if name, ok := strings.CutPrefix(line, "model name"); ok {
				parts = append(parts, strings.TrimSpace(strings.TrimLeft(name, " \t:")))
				break
			}
		}
	}
	parts = append(parts, fmt.Sprintf("%d CPUs", runtime.NumCPU()))
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int64
		if _, err := fmt.Sscanf(string(b), "MemTotal: %d kB", &kb); err == nil {
			parts = append(parts, fmt.Sprintf("%.0f GiB RAM", float64(kb)/(1<<20)))
		}
	}
	parts = append(parts, runtime.Version())
	if out, err := exec.Command(redisServer(), "--version").Output(); err == nil {
		if f := strings.Fields(string(out)); len(f) >= 3 {
			parts = append(parts, "Redis "+strings.TrimPrefix(f[2], "v="))
		}
	}
	return strings.Join(parts, ", ")
}

func redisServer() string {
	if bin := os.Getenv("REDIS_SERVER"); bin != "" {
		return bin
	}
	return "redis-server"
}

// Commit is the checked-out commit, with "+ uncommitted changes" when the
// tree is dirty.
func Commit() string {
	root, err := ModuleRoot()
	if err != nil {
		return "unknown"
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " + uncommitted changes"
	}
	return c
}

// Today is the date for a report.
func Today() string { return time.Now().UTC().Format("2006-01-02") }
