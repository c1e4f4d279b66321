package chaos

import "github.com/lockgateway/lockgateway/internal/redistest"

// startSentinel starts a master, a replica and three sentinels
// (redistest.StartSentinel); Nodes are the master and the replica, so the
// state checker reads both. The gateways reach whichever node the
// sentinels name as master directly: the Links made for them carry
// nothing, and faults act on the processes (kill, pause) instead.
func (c *Cluster) startSentinel() {
	c.T.Helper()
	c.Sentinels = redistest.StartSentinel(c.T)
	for _, srv := range c.Sentinels.Nodes {
		c.Nodes = append(c.Nodes, newNode(c.T, srv))
	}
}

// sentinelEnv is what points a gateway at the Sentinel set-up.
func sentinelEnv(st *redistest.Sentinels) map[string]string {
	return map[string]string{
		"LOCKGW_BACKEND":    Redis,
		"LOCKGW_REDIS_MODE": "sentinel",
		"LOCKGW_REDIS_URL":  st.URL(),
	}
}
