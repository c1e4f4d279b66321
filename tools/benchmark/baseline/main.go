// Command lockbench-baseline is the floor lockbench measures the gateway
// against: plain net/http and go-redis running the gateway's own acquire and
// release Lua scripts, with no router, no validation, no middleware and no
// logging. Whatever the gateway costs above this server is the price of its
// features; this server's cost is the price of HTTP plus one Redis script per
// request on this machine.
//
// It serves only what the benchmark needs:
//
//	PUT    /locks/{key}   201 {"token":…,"fence":…}, 409 when held
//	DELETE /locks/{key}   204, 404 not held, 412 other token (Lock-Token header)
//	GET    /healthz       200
//
// The scripts are read from --lua-dir at start (the repository's
// lockstore/internal/script/lua), so the baseline runs exactly the Lua the gateway embeds.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdout, os.Stderr); err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintln(os.Stderr, "lockbench-baseline:", err)
		os.Exit(1)
	}
}
