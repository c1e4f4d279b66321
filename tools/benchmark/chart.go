package main

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// chart draws the run as an SVG a person can read: throughput bars, then
// p50/p99 latency bars, for the uncontended and the contended rows, then
// the targets. Hand-written SVG 1.1, no dependencies.
func chart(res results) []byte {
	const (
		width  = 1000
		labelX = 16  // row labels start here
		barX   = 330 // bars start here
		barW   = 440 // the longest bar
	)
	var body bytes.Buffer
	y := 0.0
	text := func(x, y float64, size int, weight, fill, anchor, s string) {
		fmt.Fprintf(&body, `<text x="%.1f" y="%.1f" font-size="%d" font-weight="%s" fill="%s" text-anchor="%s">%s</text>`+"\n",
			x, y, size, weight, fill, anchor, esc(s))
	}
	rect := func(x, y, w, h float64, fill string, opacity float64) {
		fmt.Fprintf(&body, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s" fill-opacity="%.2f" rx="2"/>`+"\n",
			x, y, max(w, 1), h, fill, opacity)
	}

	m, s := res.Machine, res.Settings
	y += 30
	text(labelX, y, 20, "bold", "#111", "start", "lockgateway benchmark — "+res.Time.Format("2006-01-02 15:04 UTC"))
	y += 20
	parts := []string{fmt.Sprintf("%d × %s", m.CPUs, m.CPU), m.Memory, "Linux " + m.Kernel, m.Go, m.Redis, m.Etcd}
	if m.Commit != "" {
		parts = append(parts, "commit "+m.Commit)
	}
	text(labelX, y, 12, "normal", "#444", "start", strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), " · "))
	y += 16
	text(labelX, y, 12, "normal", "#444", "start",
		fmt.Sprintf("%s per row (%d round(s), %s warm-up each) · %d keep-alive clients, own key each · contended: %d clients, one key, wait_ms %d",
			s.Duration, s.Rounds, s.Warmup, s.Clients, s.ContendedClients, s.WaitMs))
	busiest := 0.0
	for _, r := range res.Rows {
		busiest = max(busiest, r.OtherCores)
	}
	if busiest >= 0.1 {
		y += 16
		text(labelX, y, 12, "bold", "#b91c1c", "start",
			fmt.Sprintf("other processes kept up to %.2f cores busy during a row: these numbers are skewed", busiest))
	}
	if len(s.GatewayEnv) > 0 {
		y += 16
		text(labelX, y, 12, "bold", "#b91c1c", "start", "gateways not at production defaults: "+strings.Join(s.GatewayEnv, " "))
	}
	if m.InProcs {
		y += 16
		text(labelX, y, 12, "bold", "#b91c1c", "start", "gateway ran in-process (profiling run): not comparable")
	}

	var plain, waits []row
	for _, r := range res.Rows {
		switch r.Measures {
		case "flood": // in the targets, as ratios
		case "wait":
			waits = append(waits, r)
		default:
			plain = append(plain, r)
		}
	}

	// throughput draws one bar per row, scaled to the largest.
	throughput := func(title, unit string, rows []row) {
		if len(rows) == 0 {
			return
		}
		y += 38
		text(labelX, y, 15, "bold", "#111", "start", title)
		y += 10
		top := 0.0
		for _, r := range rows {
			top = max(top, r.PerSecond)
		}
		for _, r := range rows {
			y += 8
			text(labelX, y+15, 13, "normal", "#222", "start", r.No+"  "+r.Label)
			if r.Skipped != "" {
				text(barX, y+15, 13, "normal", "#888", "start", r.Skipped)
			} else {
				w := barW * r.PerSecond / top
				rect(barX, y, w, 22, color(r.ID), 0.9)
				label := thousands(r.PerSecond) + unit
				if r.Errors > 0 {
					label += " (" + plural(r.Errors, "error") + ")"
				}
				text(barX+w+6, y+15, 13, "bold", "#222", "start", label)
			}
			y += 22
		}
	}

	// latency draws p50 and p99 bars per row on one scale; p99.9 is in the
	// label (one slow outlier would squash every other bar).
	latency := func(title, what string, rows []row) {
		if len(rows) == 0 {
			return
		}
		y += 38
		text(labelX, y, 15, "bold", "#111", "start", title)
		y += 10
		top := 0.0
		for _, r := range rows {
			top = max(top, r.P99)
		}
		if top == 0 {
			return
		}
		for _, r := range rows {
			y += 8
			text(labelX, y+17, 13, "normal", "#222", "start", r.No+"  "+r.Label)
			if r.Skipped != "" {
				text(barX, y+17, 13, "normal", "#888", "start", r.Skipped)
				y += 26
				continue
			}
			w50, w99 := barW*r.P50/top, barW*r.P99/top
			rect(barX, y, w50, 12, color(r.ID), 0.45)
			text(barX+w50+6, y+10, 11, "normal", "#222", "start", what+"p50 "+fmtMs(r.P50))
			rect(barX, y+14, w99, 12, color(r.ID), 0.95)
			text(barX+w99+6, y+24, 11, "normal", "#222", "start", what+"p99 "+fmtMs(r.P99)+" · p99.9 "+fmtMs(r.P999))
			y += 26
			if r.HandoffP50 != nil {
				text(barX, y+13, 11, "normal", "#555", "start", "handoff (release sent → next 201): p50 "+
					fmtMs(*r.HandoffP50)+", p99 "+fmtMs(*r.HandoffP99))
				y += 16
			}
		}
	}

	throughput("Acquire + release cycles per second, uncontended (higher is better)", "/s", plain)
	latency("Latency of one acquire + release cycle (shorter is better)", "", plain)
	throughput(fmt.Sprintf("Contended: %d clients on one key — grants per second (higher is better)", s.ContendedClients), " grants/s", waits)
	latency("Contended: wait from sending the acquire to its 201 (shorter is better)", "wait ", waits)

	// curve draws one line per system over the client counts, spaced
	// evenly (they grow about fourfold each), for one figure of each point.
	curve := func(title string, value func(*row) float64, unit func(float64) string) {
		counts, gw, base := curvePairs(res.Curve)
		if len(counts) == 0 {
			return
		}
		const plotW, plotH = 560.0, 150.0
		y += 38
		text(labelX, y, 15, "bold", "#111", "start", title)
		y += 18
		top := 0.0
		for _, p := range res.Curve {
			top = max(top, value(&p))
		}
		if top <= 0 {
			return
		}
		x0, y0 := float64(barX), y+plotH // the plot's origin
		fmt.Fprintf(&body, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x0, y0, x0+plotW, y0)
		fmt.Fprintf(&body, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x0, y0, x0, y)
		text(x0-6, y+10, 11, "normal", "#444", "end", unit(top))
		text(x0-6, y0, 11, "normal", "#444", "end", "0")
		xAt := func(i int) float64 {
			if len(counts) == 1 {
				return x0 + plotW/2
			}
			return x0 + 20 + (plotW-40)*float64(i)/float64(len(counts)-1)
		}
		for i, n := range counts {
			text(xAt(i), y0+16, 11, "normal", "#444", "middle", strconv.Itoa(n))
		}
		text(x0+plotW/2, y0+32, 11, "normal", "#444", "middle", "concurrent clients")
		for k, side := range []map[int]*row{gw, base} {
			id := curveSystems[k]
			var pts []string
			for i, n := range counts {
				r := side[n]
				if r == nil {
					continue
				}
				px, py := xAt(i), y0-plotH*value(r)/top
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", px, py))
				fmt.Fprintf(&body, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", px, py, color(id))
				text(px+5, py-5, 10, "normal", color(id), "start", unit(value(r)))
			}
			fmt.Fprintf(&body, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`+"\n", strings.Join(pts, " "), color(id))
			ly := y + 14 + float64(k)*18
			rect(labelX, ly-10, 14, 10, color(id), 0.9)
			text(labelX+20, ly, 13, "normal", "#222", "start", rowSpecs[slices.IndexFunc(rowSpecs, func(s rowSpec) bool { return s.id == id })].label)
		}
		y = y0 + 36
	}
	curve("Concurrency curve: cycles per second by clients, a key each (higher is better)",
		func(r *row) float64 { return r.PerSecond }, func(v float64) string { return thousands(v) })
	curve("Concurrency curve: p99 of one acquire + release cycle by clients (shorter is better)",
		func(r *row) float64 { return r.P99 }, fmtMs)

	if m := res.Memory; m != nil {
		y += 38
		text(labelX, y, 15, "bold", "#111", "start", "Redis memory per held lock")
		y += 20
		text(labelX, y, 13, "normal", "#222", "start", fmt.Sprintf("%.0f bytes per lock (used_memory growth over %s held locks, %.1f keys each)",
			m.BytesPerLock, thousands(float64(m.Locks)), m.KeysPerLock))
	}
	if v := res.Waiters; v != nil {
		y += 38
		text(labelX, y, 15, "bold", "#111", "start", fmt.Sprintf("%s acquires waiting on one held key, one gateway", thousands(float64(v.Waiters))))
		y += 20
		text(labelX, y, 13, "normal", "#222", "start", fmt.Sprintf("%.3f Redis scripts and %.2f commands per waiter per second · gateway RSS %.1f KiB per waiter · %s",
			v.ScriptsPerWaiter, v.CommandsPerWaiter, v.RSSPerWaiterKiB, plural(v.Errors, "error")))
	}

	if len(res.Ratios) > 0 {
		y += 38
		text(labelX, y, 15, "bold", "#111", "start", "Targets (information only)")
		y += 4
		for _, r := range res.Ratios {
			y += 20
			mark, fill, value := "–", "#666", "n/a"
			if r.Value != nil {
				value = strconv.FormatFloat(*r.Value, 'f', 2, 64)
			}
			if r.Met != nil {
				mark, fill = "✗ missed", "#b91c1c"
				if *r.Met {
					mark, fill = "✓ met", "#15803d"
				}
			}
			// The names run long (issue 17's table): the figures start
			// right of the bars' column.
			const valueX = barX + 250
			text(labelX, y, 13, "normal", "#222", "start", r.Name)
			text(valueX, y, 13, "bold", "#222", "end", value)
			target := "target " + r.Target
			if r.Met == nil && r.Value != nil {
				target = "information"
			}
			text(valueX+15, y, 13, "normal", "#444", "start", target)
			text(valueX+130, y, 13, "bold", fill, "start", mark)
			if r.Note != "" {
				y += 16
				text(labelX+20, y, 12, "normal", "#666", "start", r.Note)
			}
		}
	}
	y += 24

	var out bytes.Buffer
	fmt.Fprintf(&out, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%.0f" viewBox="0 0 %d %.0f" font-family="DejaVu Sans, Helvetica, Arial, sans-serif">`+"\n",
		width, y, width, y)
	fmt.Fprintf(&out, `<rect width="100%%" height="100%%" fill="#fff"/>`+"\n")
	out.Write(body.Bytes())
	out.WriteString("</svg>\n")
	return out.Bytes()
}

// color gives each system one colour across the chart.
func color(id string) string {
	switch id {
	case "gateway", "contended":
		return "#2563eb"
	case "baseline":
		return "#6b7280"
	case "lockstore":
		return "#0d9488"
	case "redlock":
		return "#7c3aed"
	case "etcd", "contended-etcd":
		return "#ea580c"
	}
	return "#333"
}

func esc(s string) string {
	var b bytes.Buffer
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return strconv.Itoa(n) + " " + noun + "s"
}
