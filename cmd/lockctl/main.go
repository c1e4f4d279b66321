// Command lockctl takes, inspects and releases lockgateway locks from the
// shell, and runs a command under a lock:
//
//	lockctl run --ttl 2m jobs/nightly -- /usr/local/bin/nightly.sh
//
// `run` keeps the lock alive while the command runs, releases it when the
// command exits, and terminates the command (SIGTERM, then SIGKILL after
// --grace) the moment the lock is lost. `lockctl help` lists the commands,
// flags and exit codes; docs/clients.md has examples.
package main

import (
	"context"
	"os"
)

func main() {
	os.Exit(run(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}
