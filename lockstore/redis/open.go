package redis

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/lockgateway/lockgateway/lockstore/internal/script"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
	"go.opentelemetry.io/otel/trace"
)

// RedisMode is how the redis backend reaches Redis.
type Mode string

const (
	Single   Mode = "single"   // one server: redis://host:port/db
	Sentinel Mode = "sentinel" // a master found through Sentinel
	Cluster  Mode = "cluster"  // Redis Cluster
)

// RedisModes lists the modes, for help and error texts.
var Modes = []Mode{Single, Sentinel, Cluster}

// urlForm is the URL each mode takes, as go-redis's parser for it reads it.
var urlForm = map[Mode]string{
	Single:   "redis://host:6379/0",
	Sentinel: "redis://sentinel1:26379?addr=sentinel2:26379&addr=sentinel3:26379&master_name=mymaster",
	Cluster:  "redis://node1:7000?addr=node2:7001&addr=node3:7002",
}

// RedisOptions configure OpenRedis.
type Options struct {
	Mode Mode // RedisSingle when empty
	// Timeout bounds each dial, read and write: a dead Redis costs a
	// request that long, no more.
	Timeout time.Duration
	// WaitReplicas, when above zero, holds back the answer to a grant, a
	// renewal or an extend until that many replicas acknowledged it (Redis
	// WAIT, for at most Timeout); see replicas.go. Single and Sentinel
	// modes only: on a Cluster WAIT would need the connection of the shard
	// that ran the script.
	WaitReplicas int
	// Tracer, when set, traces each command a request sends (script/trace.go).
	Tracer trace.Tracer
}

// OpenRedis returns a Redis store for url, parsed by go-redis's parser for
// the mode (ParseURL, ParseFailoverURL, ParseClusterURL). It is the one
// place the client gets the options the store relies on: timeouts of
// Timeout with context deadlines honoured, and no command retries (a
// retried release whose first attempt succeeded would report "not held";
// the caller retries, with the same token) and one dial per call (five
// would outlast the caller's deadline). The client reconnects by itself
// when Redis comes back. A URL that does not fit the mode is an error
// that shows the form the mode expects; it never repeats a password.
func Open(url string, o Options) (*Store, error) {
	mode := o.Mode
	if mode == "" {
		mode = Single
	}
	if o.WaitReplicas < 0 || (o.WaitReplicas > 0 && mode == Cluster) {
		return nil, fmt.Errorf("lockstore: waiting for %d replicas is not supported in %s mode; use 0, or a single Redis or Sentinel with replicas", o.WaitReplicas, mode)
	}
	var client redis.UniversalClient
	var sentinels []*redis.SentinelClient // for /readyz (Topology)
	var masterName string
	var tracer *script.CmdTracer
	switch mode {
	case Single:
		opts, err := redis.ParseURL(url)
		if err != nil {
			return nil, urlError(mode, err)
		}
		safeOptions{&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, &opts.MaintNotificationsConfig}.set(o.Timeout)
		client = redis.NewClient(opts)
		tracer = script.NewCmdTracer(o.Tracer, opts.Addr)
		tracer.Hook(client)
	case Sentinel:
		opts, err := redis.ParseFailoverURL(url)
		if err == nil && opts.MasterName == "" {
			err = errors.New("no master_name")
		}
		if err == nil && opts.ReplicaOnly {
			// Every lock operation writes; a replica refuses it (READONLY).
			err = errors.New("replica_only=true would send the lock scripts to a replica, which refuses writes; drop it")
		}
		if err != nil {
			return nil, urlError(mode, err)
		}
		// go-redis's failover client turns the maintenance handshake off
		// itself (FailoverOptions has no such field); its sentinel clients
		// below are ours to configure.
		safeOptions{&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, nil}.set(o.Timeout)
		client = redis.NewFailoverClient(opts)
		tracer = script.NewCmdTracer(o.Tracer, opts.MasterName)
		tracer.Hook(client)
		for _, addr := range opts.SentinelAddrs {
			sentinels = append(sentinels, redis.NewSentinelClient(&redis.Options{
				Addr: addr, Username: opts.SentinelUsername, Password: opts.SentinelPassword, TLSConfig: opts.TLSConfig,
				DialTimeout: o.Timeout, ReadTimeout: o.Timeout, WriteTimeout: o.Timeout,
				ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1, PoolSize: 1,
				MaintNotificationsConfig: noMaintNotifications(),
			}))
		}
		masterName = opts.MasterName
	case Cluster:
		opts, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, urlError(mode, err)
		}
		safeOptions{&opts.DialTimeout, &opts.ReadTimeout, &opts.WriteTimeout, &opts.ContextTimeoutEnabled, &opts.MaxRetries, &opts.DialerRetries, &opts.MaintNotificationsConfig}.set(o.Timeout)
		client = redis.NewClusterClient(opts)
		script.NewCmdTracer(o.Tracer, "").Hook(client)
	default:
		return nil, fmt.Errorf("lockstore: unknown Redis mode %q (want %s)", mode, modeList())
	}
	s := New(client)
	if s.batch != nil {
		s.batch.Trace = tracer // a pipeline's scripts get their spans as the client's commands do
	}
	s.mode = mode
	s.sentinels, s.masterName = sentinels, masterName
	s.acks = replicaAcks{replicas: o.WaitReplicas, timeout: o.Timeout}
	return s, nil
}

// safeOptions are the fields OpenRedis sets on whichever of go-redis's
// option types the mode takes (Options, FailoverOptions, ClusterOptions):
// what the store relies on, written once.
type safeOptions struct {
	dial, read, write    *time.Duration
	contextTimeout       *bool
	retries, dialRetries *int
	maint                **maintnotifications.Config // nil where go-redis has no such option
}

func (o safeOptions) set(timeout time.Duration) {
	// Every dial, read and write bounded by the backend timeout, and the
	// context's deadline honoured.
	*o.dial, *o.read, *o.write = timeout, timeout, timeout
	*o.contextTimeout = true
	// No command retries: a retried release whose first attempt succeeded
	// would report "not held"; the caller retries, with its token. One
	// dial per call: five would outlast the caller's deadline. (A Cluster
	// client still sends a command again after an EOF or a reset, in the
	// loop that follows MOVED and ASK, which MaxRetries does not govern:
	// script.CopyHook tells rule D, and a release resent after it ran
	// answers "not held" there.)
	*o.retries = -1
	*o.dialRetries = 1
	if o.maint != nil {
		*o.maint = noMaintNotifications()
	}
}

// noMaintNotifications turns off go-redis's maintenance-notifications
// handshake (CLIENT MAINT_NOTIFICATIONS, sent on every new connection in
// its default "auto" mode) as the Redlock clients do (OpenRedlock). Valkey
// and Redis versions without it refuse it and count an error for every
// connection (INFO errorstats); the gateway needs none of what it offers.
func noMaintNotifications() *maintnotifications.Config {
	return &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
}

func urlError(mode Mode, err error) error {
	// go-redis's own messages name the part that is wrong; none of them
	// repeats the URL, so none can leak its password.
	return fmt.Errorf("not a %s URL (%v); write it as %s", mode, err, urlForm[mode])
}

func modeList() string {
	names := make([]string, len(Modes))
	for i, m := range Modes {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}
