package main

import (
	"context"
	"fmt"
	"slices"
)

// The concurrency curve (row "curve", issue 17): cycles/s and latency of
// the gateway (Redis backend) and of the bare baseline at each of
// -curve client counts, each client on a key of its own. At each count
// the two systems take turns in -rounds rounds, the order reversed in
// every other round (takeTurns): one system always measured first took
// all of a drift's gain or loss (the ratio at one count moved from 0.91
// to 1.09 between runs of the same build).

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
	specs := make([]rowSpec, len(curveSystems))
	for k, id := range curveSystems {
		specs[k] = rowSpecs[slices.IndexFunc(rowSpecs, func(s rowSpec) bool { return s.id == id })]
		if id == "gateway" {
			specs[k].clients = func(ctx context.Context, b *bench, spec rowSpec, n int, prefix string) ([]client, *target, error) {
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
	}
	var out []row
	for _, n := range b.cfg.curveLevels {
		turns := make([]turn, len(specs))
		for k, spec := range specs {
			turns[k] = turn{spec: spec, clients: n, label: fmt.Sprintf("10  curve: %s, %d clients", spec.id, n)}
		}
		ms, cpus, err := b.takeTurns(ctx, turns, b.cfg.curveWindow, true)
		if err != nil {
			return nil, err
		}
		for k, spec := range specs {
			r := row{ID: spec.id, No: "10", Label: spec.labelFor(b.cfg), Measures: "cycle", Clients: n}
			r.fill(ms[k], cpus[k])
			out = append(out, r)
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
