// Package testlayer holds what the test layers share (CONTRIBUTING.md, "Tests").
package testlayer

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Main is a TestMain for a package whose -short tests wait on timers: it
// parses the flags, raises -test.parallel to n under -short
// (ParallelWaits) and runs the tests.
func Main(m *testing.M, n int) {
	flag.Parse()
	ParallelWaits(n)
	os.Exit(m.Run())
}

// ParallelWaits lets `go test -short` run up to n of a package's parallel
// tests at once, unless -test.parallel was given. Under -short the gateway's
// tests run on the memory backend and spend their time waiting on timers (a
// lease's expiry, an idle connection's timeout, a long-poll), not on the CPU;
// at the default, GOMAXPROCS (2 on a small machine), they queued behind each
// other and made the Go-only layer take over a minute. The full layer keeps
// the default: there the tests judge real servers against the clock, and
// more of them at once on a busy machine only makes that harder.
//
// Call it from TestMain, after flag.Parse and before m.Run.
func ParallelWaits(n int) {
	if !testing.Short() {
		return
	}
	given := false
	flag.Visit(func(f *flag.Flag) {
		if f.Name == "test.parallel" {
			given = true
		}
	})
	if !given {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic(err)
		}
	}
}
