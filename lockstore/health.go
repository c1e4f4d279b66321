package lockstore

import (
	"context"
	"time"
)

// What a store can tell /readyz beyond Ping, through optional interfaces
// the gateway looks for: a multi-node store's nodes, a deployment's shape.

// NodeStatus is one node of a store over several (Redlock) as /readyz
// shows it.
type NodeStatus struct {
	Addr string
	// Up is whether the node answered the last call made to it (false
	// before the first call).
	Up bool
	// QuarantinedUntil is when a node seen to restart counts again in
	// quorums; zero when it is not quarantined.
	QuarantinedUntil time.Time
	// Quarantine says why, and what bounds QuarantinedUntil; "" when the
	// node is not quarantined.
	Quarantine string
}

// Topology is what a store says about the deployment behind it, for
// /readyz.
type Topology struct {
	// Mode is the deployment's kind (Redis: single, sentinel, cluster).
	Mode string
	// Sharded: the keys are spread over Shards masters (a Redis Cluster),
	// as the client's slot map knows them; ShardsUp of them answered a
	// PING. Fewer up than there are means the locks whose keys hash to
	// the others cannot be served. Both 0 when not sharded.
	Sharded          bool
	Shards, ShardsUp int
	// Master is, behind Sentinel, the master's host:port as the first
	// sentinel to answer names it now; "" elsewhere, or when none answers.
	Master string
}

// Topologist is a store with a deployment shape worth reporting on
// /readyz (the redis backend: single, Sentinel or Cluster, and a Cluster's
// masters).
type Topologist interface {
	Topology(ctx context.Context) Topology
}
