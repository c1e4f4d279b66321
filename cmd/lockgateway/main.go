// Command lockgateway serves leases on named keys over HTTP. See the README.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/lockgateway/lockgateway/server"
)

func main() {
	// The live heap is a few MiB, so Go's default (GOGC=100, at least every
	// 4 MiB) collects nonstop under load; make bench measured 8% of CPU per
	// request saved at 400. The limit keeps a burst from growing the heap
	// unbounded. GOGC and GOMEMLIMIT in the environment still win.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(256 << 20)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lockgateway:", err)
		os.Exit(1)
	}
}
