package main

import (
	"context"
	"fmt"
	"slices"
)

// The concurrency curve (row "curve", issue 17): cycles/s and latency of
// the gateway (Redis backend) and of the bare baseline at each of
// -curve client counts, each client on a key of its own. At each count
// the two systems run one after the other, so a burst of other work on
// the machine lands on both sides of the comparison, not on one level.

// curveSystems are the rows the curve loads, by id in rowSpecs.
var curveSystems = []string{"gateway", "baseline"}

// curveGatewayName is the curve's own gateway process: up to 512 clients'
// connections would swell the shared gateway's memory, which the report
// gives after the table's load.
const curveGatewayName = "gateway (curve)"

// runCurve measures every point. Each is a row of its own, with ID the
// system's row id and Clients the count.
func (b *bench) runCurve(ctx context.Context) ([]row, error) {
	var gw *target
	defer func() {
		if gw != nil {
			b.stopTarget(gw)
		}
	}()
	var out []row
	for _, n := range b.cfg.curveLevels {
		for _, id := range curveSystems {
			i := slices.IndexFunc(rowSpecs, func(s rowSpec) bool { return s.id == id })
			spec := rowSpecs[i]
			if id == "gateway" {
				spec.clients = func(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
					if gw == nil {
						addr, err := b.redis(ctx)
						if err != nil {
							return nil, nil, err
						}
						if gw, err = b.startGateway(ctx, curveGatewayName, "LOCKGW_BACKEND=redis", "LOCKGW_REDIS_URL=redis://"+addr+"/0"); err != nil {
							return nil, nil, err
						}
					}
					return lockClients(b, spec, n, prefix, gw.addr), gw, nil
				}
			}
			r := row{ID: id, No: "10", Label: spec.labelFor(b.cfg), Measures: "cycle", Clients: n}
			fmt.Fprintf(b.stderr, "lockbench: 10  curve: %s, %d clients", id, n)
			m, cpu, err := b.runRound(ctx, spec, n, b.cfg.curveWindow)
			if err != nil {
				fmt.Fprintln(b.stderr, ": failed")
				return nil, fmt.Errorf("%s at %d clients: %w", id, n, err)
			}
			r.fill(m, cpu)
			fmt.Fprintf(b.stderr, ": %s/s, p99 %s, %d errors\n", thousands(r.PerSecond), fmtMs(r.P99), r.Errors)
			out = append(out, r)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
	}
	return out, nil
}

// serverCPU is the CPU time per cycle of the process that served the
// curve's point r: its gateway or the baseline (0 when it ran in-process).
func serverCPU(r *row) float64 {
	if r.ID == "baseline" {
		return r.CPUPerCycle["baseline"]
	}
	return r.CPUPerCycle[curveGatewayName]
}

// curvePair finds, for each count, the gateway's and the baseline's point.
func curvePairs(points []row) (counts []int, gw, base map[int]*row) {
	gw, base = map[int]*row{}, map[int]*row{}
	for i := range points {
		p := &points[i]
		if !slices.Contains(counts, p.Clients) {
			counts = append(counts, p.Clients)
		}
		if p.ID == "baseline" {
			base[p.Clients] = p
		} else {
			gw[p.Clients] = p
		}
	}
	return counts, gw, base
}
