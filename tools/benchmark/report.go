package main

import (
	"cmp"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// results is one run, as written to the JSON file.
type results struct {
	Time      time.Time      `json:"time"`
	Machine   machine        `json:"machine"`
	Settings  settings       `json:"settings"`
	Rows      []row          `json:"rows"`
	Ratios    []ratio        `json:"ratios"`
	Processes []processStats `json:"gateway_processes"`
}

type machine struct {
	CPUs   int    `json:"cpus"`
	CPU    string `json:"cpu"`
	Memory string `json:"memory"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	Redis  string `json:"redis"`
	Etcd   string `json:"etcd,omitempty"`
	Commit string `json:"commit,omitempty"`
	// LoadBefore is /proc/loadavg's 1-minute figure before the first row:
	// other work on the machine skews every row.
	LoadBefore string `json:"load_before"`
	InProcs    bool   `json:"gateway_in_process,omitempty"`
}

type settings struct {
	Duration         string `json:"duration"`
	Warmup           string `json:"warmup"`
	Rounds           int    `json:"rounds"`
	Clients          int    `json:"clients"`
	ContendedClients int    `json:"contended_clients"`
	WaitMs           int    `json:"wait_ms"`
	TTLms            int    `json:"ttl_ms"`
	// GatewayEnv is what -gateway-env changed from production defaults.
	GatewayEnv []string `json:"gateway_env,omitempty"`
}

func newSettings(c config) settings {
	env := c.gatewayEnv
	if c.profileDir != "" {
		env = append(slices.Clone(env), "LOCKGW_PPROF=true")
	}
	return settings{
		Duration: c.duration.String(), Warmup: c.warmup.String(), Rounds: c.rounds,
		Clients: c.concurrency, ContendedClients: c.contended, WaitMs: c.waitMs, TTLms: ttlMs,
		GatewayEnv: env,
	}
}

// row is one line of the table. Latencies are in milliseconds: of a whole
// acquire+release cycle (measures "cycle") or of the wait from sending the
// acquire to its 201 (measures "wait").
type row struct {
	ID         string   `json:"id"`
	No         string   `json:"no"`
	Label      string   `json:"label"`
	Measures   string   `json:"measures"`
	Clients    int      `json:"clients"`
	Skipped    string   `json:"skipped,omitempty"`
	PerSecond  float64  `json:"per_second"` // cycles, or grants, per second
	Count      int      `json:"count"`
	P50        float64  `json:"p50_ms"`
	P99        float64  `json:"p99_ms"`
	P999       float64  `json:"p999_ms"`
	Max        float64  `json:"max_ms"`
	HandoffP50 *float64 `json:"handoff_p50_ms,omitempty"`
	HandoffP99 *float64 `json:"handoff_p99_ms,omitempty"`
	Errors     int      `json:"errors"`
	// OtherCores is how many cores processes lockbench did not start used
	// on average during the row: other work skews the row.
	OtherCores float64 `json:"other_cores"`
	// CPUPerCycle is the CPU time each process spent per cycle (or grant),
	// in microseconds: where the machine's work went.
	CPUPerCycle map[string]float64 `json:"cpu_us_per_cycle,omitempty"`
	ErrorKinds  map[string]int     `json:"error_kinds,omitempty"`
	// Flood rows (measures "flood"): what the flood was, how much of it
	// the gateway held, the gateway's CPU per small-client cycle and its
	// RSS with the flood in place.
	Flood         string  `json:"flood,omitempty"`
	FloodHeld     int64   `json:"flood_held,omitempty"`
	GatewayCPU    float64 `json:"gateway_cpu_us_per_cycle,omitempty"`
	GatewayRSSMiB float64 `json:"gateway_rss_mib,omitempty"`
}

func (r *row) fill(m measurement, cpu cpuUse) {
	slices.Sort(m.latencies)
	slices.Sort(m.handoffs)
	r.OtherCores = cpu.otherCores()
	// Over the warm-ups and the windows alike: CPU time cannot be split
	// between them.
	r.CPUPerCycle = cpu.perCycle(m.total)
	r.Count = m.count
	r.PerSecond = float64(m.count) / m.window.Seconds()
	r.P50 = jsonSafe(percentile(m.latencies, 0.50))
	r.P99 = jsonSafe(percentile(m.latencies, 0.99))
	r.P999 = jsonSafe(percentile(m.latencies, 0.999))
	r.Max = jsonSafe(percentile(m.latencies, 1))
	if r.Measures == "wait" && len(m.handoffs) > 0 {
		p50, p99 := percentile(m.handoffs, 0.50), percentile(m.handoffs, 0.99)
		r.HandoffP50, r.HandoffP99 = &p50, &p99
	}
	for _, n := range m.errors {
		r.Errors += n
	}
	if r.Errors > 0 {
		r.ErrorKinds = m.errors
	}
}

// jsonSafe turns NaN (no samples) into 0, which JSON can carry.
func jsonSafe(f float64) float64 {
	if math.IsNaN(f) {
		return 0
	}
	return f
}

// processStats is what lockbench saw of a gateway process: resident memory
// (from /proc), and goroutines and heap (from its /metrics), before and
// after its load.
type processStats struct {
	Name             string   `json:"name"`
	InProcess        bool     `json:"in_process,omitempty"`
	Cycles           int64    `json:"cycles"`
	RSSStartMiB      float64  `json:"rss_start_mib,omitempty"`
	RSSEndMiB        float64  `json:"rss_end_mib,omitempty"`
	RSSPeakMiB       float64  `json:"rss_peak_mib,omitempty"`
	GoroutinesBefore *int     `json:"goroutines_before,omitempty"`
	GoroutinesAfter  *int     `json:"goroutines_after,omitempty"`
	HeapBeforeMiB    *float64 `json:"heap_alloc_before_mib,omitempty"`
	HeapAfterMiB     *float64 `json:"heap_alloc_after_mib,omitempty"`
}

// ratio is one of the project's targets, computed from this run.
type ratio struct {
	Name   string   `json:"name"`
	Value  *float64 `json:"value,omitempty"`
	Target string   `json:"target,omitempty"` // empty: information only
	Met    *bool    `json:"met,omitempty"`
	Note   string   `json:"note,omitempty"`
}

// ratios computes the targets of issues 5 and 6. They inform; they never
// fail a run.
func ratios(rows []row, procs []processStats) []ratio {
	get := func(id string) *row {
		for i := range rows {
			if rows[i].ID == id && rows[i].Skipped == "" && rows[i].Count > 0 {
				return &rows[i]
			}
		}
		return nil
	}
	gw, base, etcd, rl := get("gateway"), get("baseline"), get("etcd"), get("redlock")
	cgw, cetcd := get("contended"), get("contended-etcd")
	var out []ratio
	add := func(name string, a, b *row, f func(a, b *row) float64, atLeast bool, bound float64) {
		r := ratio{Name: name}
		if atLeast {
			r.Target = "≥ " + strconv.FormatFloat(bound, 'g', -1, 64)
		} else {
			r.Target = "≤ " + strconv.FormatFloat(bound, 'g', -1, 64)
		}
		if a == nil || b == nil {
			r.Note = "n/a: a row was not run"
			out = append(out, r)
			return
		}
		v := f(a, b)
		met := v >= bound
		if !atLeast {
			met = v <= bound
		}
		r.Value, r.Met = &v, &met
		out = append(out, r)
	}
	perSec := func(a, b *row) float64 { return a.PerSecond / b.PerSecond }
	p99 := func(a, b *row) float64 { return a.P99 / b.P99 }
	add("gateway / baseline, cycles/s", gw, base, perSec, true, 0.85)
	if gw != nil && base != nil && cpuTotal(gw) > 0 {
		// On a CPU-bound machine, cycles/s go as the inverse of the CPU
		// all processes spend per cycle; unlike cycles/s, that cost
		// hardly moves when other work shares the machine.
		v := cpuTotal(base) / cpuTotal(gw)
		out = append(out, ratio{Name: "  same, from CPU time per cycle", Value: &v,
			Note: fmt.Sprintf("all processes: %.0f µs per gateway cycle, %.0f per baseline cycle", cpuTotal(gw), cpuTotal(base))})
	}
	add("gateway / baseline, p99", gw, base, p99, false, 1.3)
	add("gateway / etcd, cycles/s", gw, etcd, perSec, true, 2.5)
	add("redlock / gateway, cycles/s", rl, gw, perSec, true, 0.5)
	add("contended gateway / etcd, grants/s", cgw, cetcd, perSec, true, 5)
	for _, kind := range []string{"locks", "waiters", "conns"} {
		var quiet, loud *row
		for i := range rows {
			if rows[i].Flood == kind && rows[i].Count > 0 {
				if strings.HasSuffix(rows[i].ID, "-quiet") {
					quiet = &rows[i]
				} else {
					loud = &rows[i]
				}
			}
		}
		if quiet == nil || loud == nil {
			continue
		}
		gwCPU := func(a, b *row) float64 { return a.GatewayCPU / b.GatewayCPU }
		add(fmt.Sprintf("flood %s: gateway CPU per cycle ×", kind), loud, quiet, gwCPU, false, 1.3)
		r := &out[len(out)-1]
		r.Note = fmt.Sprintf("%.0f → %.0f µs; p99 %s → %s; flood held %s", quiet.GatewayCPU, loud.GatewayCPU,
			fmtMs(quiet.P99), fmtMs(loud.P99), thousands(float64(loud.FloodHeld)))
	}

	for _, p := range procs {
		if p.InProcess || p.RSSEndMiB == 0 {
			continue
		}
		v, met := p.RSSEndMiB, p.RSSEndMiB <= 64
		r := ratio{Name: p.Name + " RSS after load, MiB", Value: &v, Target: "≤ 64", Met: &met}
		if p.Cycles < 1_000_000 {
			r.Note = fmt.Sprintf("after %s cycles; the target is after 1,000,000", thousands(float64(p.Cycles)))
		}
		out = append(out, r)
	}
	return out
}

func printReport(w io.Writer, res results) {
	m := res.Machine
	fmt.Fprintf(w, "lockbench %s · %d × %s · %s · Linux %s · %s\n",
		res.Time.Format("2006-01-02 15:04 UTC"), m.CPUs, m.CPU, m.Memory, m.Kernel, m.Go)
	fmt.Fprintf(w, "%s", m.Redis)
	if m.Etcd != "" {
		fmt.Fprintf(w, " · %s", m.Etcd)
	}
	if m.Commit != "" {
		fmt.Fprintf(w, " · commit %s", m.Commit)
	}
	fmt.Fprintf(w, " · load average before the run %s\n", m.LoadBefore)
	s := res.Settings
	rounds := ""
	if s.Rounds > 1 {
		rounds = fmt.Sprintf(" in %d interleaved rounds", s.Rounds)
	}
	fmt.Fprintf(w, "%s per row%s after %s warm-up each · uncontended: %d keep-alive clients, a key each, latency of acquire+release · "+
		"contended: %d clients on one key, latency of the wait for 201 (wait_ms %d)\n",
		s.Duration, rounds, s.Warmup, s.Clients, s.ContendedClients, s.WaitMs)
	if len(s.GatewayEnv) > 0 {
		fmt.Fprintf(w, "NOTE: gateways not at production defaults: %s\n", strings.Join(s.GatewayEnv, " "))
	}
	if m.InProcs {
		fmt.Fprintln(w, "NOTE: the gateway ran inside lockbench (-in-process): these numbers are for profiling, not comparison")
	}
	fmt.Fprintln(w)

	const head = "%-3s %-40s %10s %9s %9s %9s %7s  %s\n"
	const line = "%-3s %-40s %10s %9s %9s %9s %7d  %s\n"
	header := func(rate, lat string) {
		fmt.Fprintf(w, head, "", "", rate, lat+"p50", lat+"p99", lat+"p99.9", "errors", "")
	}
	plain := false
	for _, r := range res.Rows {
		plain = plain || r.Measures == "cycle"
	}
	if plain {
		header("cycles/s", "")
	}
	waitHeader := false
	floodHeader := false
	for _, r := range res.Rows {
		if r.Measures == "wait" && !waitHeader {
			fmt.Fprintln(w)
			header("grants/s", "wait ")
			waitHeader = true
		}
		if r.Measures == "flood" && !floodHeader {
			fmt.Fprintf(w, "\nfloods: a small client (%d keep-alive clients, a key each) on a gateway of its own, alone and beside another client's flood\n",
				r.Clients)
			header("cycles/s", "")
			floodHeader = true
		}
		if r.Skipped != "" {
			fmt.Fprintf(w, "%-3s %-40s %s\n", r.No, r.Label, r.Skipped)
			continue
		}
		note := ""
		if r.HandoffP50 != nil {
			note = fmt.Sprintf("handoff p50 %s, p99 %s", fmtMs(*r.HandoffP50), fmtMs(*r.HandoffP99))
		}
		if r.Measures == "flood" {
			note = fmt.Sprintf("gateway %.0f µs/cycle", r.GatewayCPU)
			if r.GatewayRSSMiB > 0 {
				note += fmt.Sprintf(", RSS %.0f MiB", r.GatewayRSSMiB)
			}
			if r.FloodHeld > 0 {
				note += fmt.Sprintf(", flood held %s", thousands(float64(r.FloodHeld)))
			}
		}
		fmt.Fprintf(w, line, r.No, r.Label, thousands(r.PerSecond), fmtMs(r.P50), fmtMs(r.P99), fmtMs(r.P999), r.Errors, note)
	}
	for _, r := range res.Rows {
		for _, k := range slices.Sorted(maps.Keys(r.ErrorKinds)) {
			fmt.Fprintf(w, "    row %s error: %s × %d\n", r.No, k, r.ErrorKinds[k])
		}
	}
	if waitHeader {
		fmt.Fprintln(w, "    handoff: from a release being sent to the next waiter's 201 arriving")
	}
	fmt.Fprintln(w, "\nCPU time per cycle (grant), µs, by process:")
	for _, r := range res.Rows {
		if len(r.CPUPerCycle) == 0 {
			continue
		}
		names := slices.SortedFunc(maps.Keys(r.CPUPerCycle), func(a, b string) int {
			return cmp.Compare(r.CPUPerCycle[b], r.CPUPerCycle[a])
		})
		var parts []string
		for _, n := range names {
			parts = append(parts, fmt.Sprintf("%s %.0f", n, r.CPUPerCycle[n]))
		}
		fmt.Fprintf(w, "  %-3s total %4.0f: %s\n", r.No, cpuTotal(&r), strings.Join(parts, " · "))
	}
	for _, r := range res.Rows {
		if r.OtherCores >= 0.1 {
			fmt.Fprintf(w, "    WARNING row %s: other processes kept %.2f cores busy meanwhile; rerun on a quiet machine\n", r.No, r.OtherCores)
		}
	}

	fmt.Fprintln(w, "\ntargets (information only; never a failure):")
	for _, r := range res.Ratios {
		verdict, value := "", "n/a"
		if r.Value != nil {
			value = strconv.FormatFloat(*r.Value, 'f', 2, 64)
		}
		if r.Met != nil {
			verdict = "missed"
			if *r.Met {
				verdict = "met"
			}
		}
		target := "target " + r.Target
		if r.Target == "" {
			target = "(information)"
		}
		fmt.Fprintf(w, "  %-45s %7s  %-13s %-6s %s\n", r.Name, value, target, verdict, r.Note)
	}

	if len(res.Processes) > 0 {
		fmt.Fprintln(w, "\ngateway processes:")
	}
	for _, p := range res.Processes {
		if p.InProcess {
			fmt.Fprintf(w, "  %s: %s cycles; RSS and goroutines n/a in process\n", p.Name, thousands(float64(p.Cycles)))
			continue
		}
		fmt.Fprintf(w, "  %-21s %s cycles · RSS %.1f → %.1f MiB (peak %.1f) · goroutines %s → %s · heap allocated %s → %s MiB\n",
			p.Name+":", thousands(float64(p.Cycles)), p.RSSStartMiB, p.RSSEndMiB, p.RSSPeakMiB,
			intOrNA(p.GoroutinesBefore), intOrNA(p.GoroutinesAfter), mibOrNA(p.HeapBeforeMiB), mibOrNA(p.HeapAfterMiB))
	}
	if len(res.Processes) > 0 {
		fmt.Fprintln(w, "  (before the first load → after the last, idle; the heap figure includes garbage not yet collected)")
	}
}

func mibOrNA(p *float64) string {
	if p == nil {
		return "n/a"
	}
	return strconv.FormatFloat(*p, 'f', 1, 64)
}

// cpuTotal is the CPU time all processes spent per cycle of r, in µs.
func cpuTotal(r *row) float64 {
	total := 0.0
	for _, us := range r.CPUPerCycle {
		total += us
	}
	return total
}

func intOrNA(p *int) string {
	if p == nil {
		return "n/a"
	}
	return strconv.Itoa(*p)
}

// fmtMs prints a latency in milliseconds with about three significant
// digits.
func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v < 10:
		return strconv.FormatFloat(v, 'f', 2, 64) + "ms"
	case v < 100:
		return strconv.FormatFloat(v, 'f', 1, 64) + "ms"
	}
	return strconv.FormatFloat(v, 'f', 0, 64) + "ms"
}

// thousands prints a count rounded to an integer, with thousands separators.
func thousands(v float64) string {
	s := strconv.FormatInt(int64(math.Round(v)), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && c != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
