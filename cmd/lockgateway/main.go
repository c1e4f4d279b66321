// Command lockgateway serves leases on named keys over HTTP. See README.md and docs/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/lockgateway/lockgateway/server"
)

func main() {
	// server.Run also sets the garbage collector: GOGC 400 and a soft
	// memory limit that follows the machine (server/gc_tuning.go).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := server.Run(ctx, os.Args[1:], os.Getenv, os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "lockgateway:", err)
		os.Exit(1)
	}
}
