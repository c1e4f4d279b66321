// Package redis is the backend over one Redis deployment: a single
// server, a master found through Sentinel, or a Redis Cluster. Open builds
// a store from a redis:// URL (LOCKGW_REDIS_URL, LOCKGW_REDIS_MODE); every
// operation is one Lua script, so no read-then-write can interleave with
// another client's, and Redis keeps only a SHA-256 digest of each token.
//
// Its files:
//
//	redis.go          the type, Acquire, Extend, Release, Inspect, Ping
//	open.go           Open: URLs, modes, client settings
//	sem.go            semaphores
//	wait.go           a waiting acquire (lockstore/internal/wait, wait.Told)
//	wait_room.go      one gateway's waiters of a key and their heartbeat
//	sem_room.go       the same for a semaphore
//	batch.go          holds' renewals of leases in one pipeline
//	sem_batch.go      the same for permits
//	replicas.go       LOCKGW_REDIS_WAIT_REPLICAS: grants acknowledged by replicas
//	cluster_quota.go  per-user quotas on a Cluster, in two steps
//	topology.go       what /readyz says of the deployment
//	list.go           GET /locks and /semaphores: SCAN of every master
//	window.go         rate-limit windows
//	signal.go         what the watch hubs listen to
//
// The Go side of the scripts (calls, keys, values, rule D's clocks, the
// notifier) is lockstore/internal/script, shared with lockstore/redlock.
package redis
