package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterSlots is how many hash slots a Redis Cluster has.
const clusterSlots = 16384

// busOffset is where a cluster node listens for its peers: its port plus
// 10000, as Redis places the cluster bus by default.
const busOffset = 10000

// Cluster is a Redis Cluster of masters, each a Server of its own, and
// optionally replicas: the slots split evenly among the masters in node
// order, joined with CLUSTER MEET, ready (cluster_state:ok on every node,
// every replica in sync) when StartCluster returns.
type Cluster struct {
	Masters []*Server
	// Replicas[i] are Masters[i]'s replicas (StartClusterReplicas).
	Replicas [][]*Server
}

// StartCluster starts a Redis Cluster of n masters on free loopback ports
// (each with its bus port, port+10000, free too), every node in a folder
// of the test's temporary folder; they are killed when the test ends. It
// fails the test, saying how to get one, when redis-server cannot run a
// cluster (it needs Redis 7 or later: CLUSTER ADDSLOTSRANGE, SPUBLISH).
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	return StartClusterReplicas(t, n, 0)
}

// StartClusterReplicas is StartCluster with that many replicas of each
// master, so that the cluster fails a dead master over (after its
// cluster-node-timeout of 2 s).
func StartClusterReplicas(t testing.TB, masters, replicas int) *Cluster {
	t.Helper()
	return startCluster(t, Binary(t), masters, replicas)
}

func startCluster(t testing.TB, bin string, masters, replicas int) *Cluster {
	t.Helper()
	c, err := RunClusterReplicas(Options{Bin: bin, Dir: t.TempDir()}, masters, replicas)
	if c != nil {
		for _, s := range c.nodes() {
			s.t = t
		}
		t.Cleanup(c.Kill)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// RunCluster is StartCluster for a caller that is not a test, which must
// Kill the cluster when done. opts.Dir is the folder the nodes' folders go
// in; opts.Args are added to every node's. On error it returns the nodes it
// started (to Kill) and why it could not make a cluster of them.
func RunCluster(opts Options, n int) (*Cluster, error) {
	return RunClusterReplicas(opts, n, 0)
}

// RunClusterReplicas is RunCluster with that many replicas of each master.
func RunClusterReplicas(opts Options, n, replicas int) (*Cluster, error) {
	if n < 1 || n > 100 || replicas < 0 || replicas > 5 {
		return nil, fmt.Errorf("redistest: a cluster of %d masters with %d replicas each; want 1 to 100 masters and 0 to 5 replicas", n, replicas)
	}
	if opts.Dir == "" {
		return nil, errors.New("redistest: RunCluster needs Options.Dir")
	}
	if opts.Bin == "" {
		bin, err := FindBinary()
		if err != nil {
			return nil, err
		}
		opts.Bin = bin
	}
	base := opts.Dir
	c := &Cluster{Replicas: make([][]*Server, n)}
	for i := range n * (1 + replicas) {
		o := opts
		o.Dir = filepath.Join(base, "node"+strconv.Itoa(i))
		if err := mkdir(o.Dir); err != nil {
			return c, err
		}
		// Each node keeps its nodes.conf in its own --dir; nothing else is
		// written (no persistence).
		o.Args = append([]string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			// A node that stops answering is failed after 2 s, not 15:
			// tests that kill a node wait that long, no more.
			"--cluster-node-timeout", "2000",
			// A replica's first sync starts at once, not after the
			// default 5 s a master waits for more replicas to join it.
			"--repl-diskless-sync-delay", "0",
		}, opts.Args...)
		o.port = clusterPort
		s, err := Run(o)
		if err != nil {
			if strings.Contains(err.Error(), "cluster") || strings.Contains(err.Error(), "Bad directive") {
				return c, fmt.Errorf("redistest: %s cannot run a Redis Cluster node (%v). "+
					"Install Redis 7 or later built with cluster support (Debian's redis-server package is), "+
					"or point REDIS_SERVER at such a redis-server", opts.Bin, err)
			}
			return c, fmt.Errorf("redistest: cluster node %d: %w", i, err)
		}
		if i < n {
			c.Masters = append(c.Masters, s)
		} else {
			m := (i - n) % n
			c.Replicas[m] = append(c.Replicas[m], s)
		}
	}
	if err := c.form(); err != nil {
		return c, err
	}
	return c, nil
}

// form gives each master its share of the slots, introduces them to one
// another and waits until every node sees the whole cluster.
func (c *Cluster) form() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n := len(c.Masters)
	for i, s := range c.Masters {
		rdb := s.plainClient()
		defer rdb.Close()
		info, err := rdb.Info(ctx, "server").Result()
		if err != nil {
			return fmt.Errorf("redistest: cluster node %s: INFO: %w", s.Addr(), err)
		}
		if v := infoField(info, "redis_version"); !atLeast7(v) {
			return fmt.Errorf("redistest: redis-server %s is too old for the cluster tests: "+
				"sharded pub/sub (SPUBLISH) and CLUSTER ADDSLOTSRANGE need Redis 7 or later; "+
				"install it (Debian 12's redis-server package is 7.0) or point REDIS_SERVER at one", v)
		}
		// Distinct config epochs, as redis-cli --cluster create sets them,
		// so no two masters start out claiming the same epoch.
		if err := rdb.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("redistest: cluster node %s: CLUSTER SET-CONFIG-EPOCH: %w", s.Addr(), err)
		}
		first, last := i*clusterSlots/n, (i+1)*clusterSlots/n-1
		if err := rdb.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", first, last).Err(); err != nil {
			return fmt.Errorf("redistest: cluster node %s: CLUSTER ADDSLOTSRANGE %d %d: %w", s.Addr(), first, last, err)
		}
		if i > 0 {
			first := c.Masters[0]
			if err := rdb.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", first.port).Err(); err != nil {
				return fmt.Errorf("redistest: cluster node %s: CLUSTER MEET %s: %w", s.Addr(), first.Addr(), err)
			}
		}
	}
	for m, rs := range c.Replicas {
		if err := c.replicate(ctx, c.Masters[m], rs); err != nil {
			return err
		}
	}
	// Ready means every node has every slot covered and knows every node:
	// a client that loads the slot map from any of them routes every key.
	all := c.nodes()
	n = len(all)
	for _, s := range all {
		rdb := s.plainClient()
		defer rdb.Close()
		var last string
		for {
			info, err := rdb.ClusterInfo(ctx).Result()
			if err == nil && infoField(info, "cluster_state") == "ok" &&
				infoField(info, "cluster_known_nodes") == strconv.Itoa(n) &&
				infoField(info, "cluster_slots_ok") == strconv.Itoa(clusterSlots) {
				break
			}
			if err != nil {
				last = err.Error()
			} else {
				last = strings.Join(strings.Fields(info), " ")
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redistest: cluster node %s not ready in 30s: %s", s.Addr(), last)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// Addrs are the masters' host:port, in slot order.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.Masters))
	for i, s := range c.Masters {
		addrs[i] = s.Addr()
	}
	return addrs
}

// URL is the cluster's URL as LOCKGW_REDIS_URL takes it with
// LOCKGW_REDIS_MODE=cluster (go-redis's ParseClusterURL form): the first
// master, then the others as addr= parameters.
func (c *Cluster) URL() string {
	addrs := c.Addrs()
	u := "redis://" + addrs[0]
	for i, a := range addrs[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + a
	}
	return u
}

// Client returns a new cluster client, closed when the test ends (a
// cluster from RunCluster: the caller closes it).
func (c *Cluster) Client() *redis.ClusterClient {
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), MaxRetries: -1, MaintNotificationsConfig: noMaint()})
	if t := c.Masters[0].t; t != nil {
		t.Cleanup(func() { _ = rdb.Close() })
	}
	return rdb
}

// Kill kills every node. Safe to call twice.
func (c *Cluster) Kill() {
	for _, s := range c.nodes() {
		s.Kill()
	}
}

// plainClient is a client of this one node, for the caller to close.
func (s *Server) plainClient() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, MaintNotificationsConfig: noMaint()})
}

// clusterPort is a free loopback port whose cluster bus port (+10000) is
// free too and below 65536.
func clusterPort() (int, error) {
	for range 50 {
		p, err := LoopbackPort()
		if err != nil {
			return 0, err
		}
		bus := p + busOffset
		if bus > 65535 || bus == 6379 || bus == 8080 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(bus)))
		if err != nil {
			continue
		}
		_ = l.Close()
		return p, nil
	}
	return 0, errors.New("redistest: no free loopback port with its cluster bus port (+10000) free")
}

func infoField(info, name string) string {
	for line := range strings.SplitSeq(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

func atLeast7(version string) bool {
	major, _, _ := strings.Cut(version, ".")
	n, err := strconv.Atoi(major)
	return err == nil && n >= 7
}

func mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("redistest: %w", err)
	}
	return nil
}

// replicate makes rs replicas of master once they know it, and waits until
// each is in sync.
func (c *Cluster) replicate(ctx context.Context, master *Server, rs []*Server) error {
	m := master.plainClient()
	defer m.Close()
	id, err := m.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return fmt.Errorf("redistest: cluster node %s: CLUSTER MYID: %w", master.Addr(), err)
	}
	for _, r := range rs {
		rdb := r.plainClient()
		defer rdb.Close()
		if err := rdb.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", master.port).Err(); err != nil {
			return fmt.Errorf("redistest: cluster node %s: CLUSTER MEET %s: %w", r.Addr(), master.Addr(), err)
		}
		// CLUSTER REPLICATE needs the replica to know the master's id,
		// which the handshake brings.
		for {
			err := rdb.Do(ctx, "CLUSTER", "REPLICATE", id).Err()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redistest: cluster node %s: CLUSTER REPLICATE %s: %w", r.Addr(), master.Addr(), err)
			case <-time.After(20 * time.Millisecond):
			}
		}
		for {
			info, err := rdb.Info(ctx, "replication").Result()
			if err == nil && infoField(info, "master_link_status") == "up" {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("redistest: replica %s of %s not in sync in 30s", r.Addr(), master.Addr())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

// nodes are the masters, then the replicas.
func (c *Cluster) nodes() []*Server {
	all := append([]*Server(nil), c.Masters...)
	for _, rs := range c.Replicas {
		all = append(all, rs...)
	}
	return all
}

// WaitFailover waits until one of the replicas of the master at index m
// (killed by the caller) is a master that owns slots, and returns it.
func (c *Cluster) WaitFailover(m int, timeout time.Duration) (*Server, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		for _, r := range c.Replicas[m] {
			rdb := r.plainClient()
			ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
			info, err := rdb.Info(ctx, "replication").Result()
			cinfo, cerr := rdb.ClusterInfo(ctx).Result()
			cancel()
			_ = rdb.Close()
			if err == nil && cerr == nil && infoField(info, "role") == "master" && infoField(cinfo, "cluster_state") == "ok" {
				return r, nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("redistest: no replica of master %d took over in %v", m, timeout)
}

// MoveSlot migrates key's hash slot, keys and all, from the master that
// owns it to dst, as redis-cli --cluster reshard does, and tells every
// master. Clients learn of it only from the MOVED replies they get.
func (c *Cluster) MoveSlot(key string, dst *Server) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := dst.plainClient()
	defer d.Close()
	slot, err := d.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		return fmt.Errorf("redistest: CLUSTER KEYSLOT: %w", err)
	}
	var src *Server
	for _, m := range c.Masters {
		rdb := m.plainClient()
		// Only the owner answers a key command for the slot without MOVED.
		if rdb.Exists(ctx, key).Err() == nil {
			src = m
		}
		_ = rdb.Close()
		if src != nil {
			break
		}
	}
	if src == nil {
		return fmt.Errorf("redistest: no master owns the slot of %s", key)
	}
	if src == dst {
		return nil
	}
	s := src.plainClient()
	defer s.Close()
	srcID, err := s.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	dstID, err := d.Do(ctx, "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	if err := d.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT IMPORTING: %w", err)
	}
	if err := s.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		return fmt.Errorf("redistest: SETSLOT MIGRATING: %w", err)
	}
	for {
		keys, err := s.ClusterGetKeysInSlot(ctx, int(slot), 100).Result()
		if err != nil {
			return err
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := s.Do(ctx, args...).Err(); err != nil {
			return fmt.Errorf("redistest: MIGRATE: %w", err)
		}
	}
	// The new owner first, then the old one, then the others, as
	// redis-cli does.
	order := []*Server{dst, src}
	for _, m := range c.Masters {
		if m != src && m != dst {
			order = append(order, m)
		}
	}
	for _, m := range order {
		rdb := m.plainClient()
		err := rdb.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		_ = rdb.Close()
		if err != nil {
			return fmt.Errorf("redistest: SETSLOT NODE on %s: %w", m.Addr(), err)
		}
	}
	return nil
}
