package main

import (
	"context"
	"fmt"
	"os"

	"github.com/lockgateway/lockgateway/client"
)

// watch prints each change of a lock as a line until interrupted: the
// stream of GET /locks/{key} with Accept: text/event-stream (client.Watch,
// which reconnects by itself).
func (g *globals) watch(ctx context.Context, args []string, sigs <-chan os.Signal) int {
	fs := g.flagSet("watch")
	key, c, err := g.keyArgs(fs, args)
	if err != nil {
		return usageError(g, err)
	}
	ctx, stop := interruptible(ctx, sigs)
	defer stop()
	changes, err := c.Watch(ctx, key)
	if err != nil {
		return g.fail(ctx, "watch", key, err)
	}
	for ch := range changes {
		if g.json {
			g.printJSON(changeJSON(ch))
		} else {
			fmt.Fprintln(g.stdout, ch)
		}
	}
	return exitOK
}

func changeJSON(ch client.Change) map[string]any {
	out := map[string]any{"event": ch.Event, "id": ch.ID, "key": ch.Lock.Key, "held": ch.Held()}
	if ch.Lock.Fence != 0 {
		out["fence"] = ch.Lock.Fence
	}
	if ch.Lock.Owner != "" {
		out["owner"] = ch.Lock.Owner
	}
	if ch.Held() {
		out["ttl_ms"] = ch.Lock.TTL.Milliseconds()
		out["expires_at"] = ch.Lock.ExpiresAt
	}
	return out
}
