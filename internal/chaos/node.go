package chaos

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// Node is a redis-server process on a free loopback port, without
// persistence, killed when the test ends. Unlike redistest.Server it can run
// on a shifted clock (see ClockShim) and be restarted with a new one.
type Node struct {
	t     testing.TB
	bin   string
	port  int
	dir   string
	shim  string // path of the clock shim library; "" runs on the host's clock
	clock string // the file holding the shim's offset

	mu     sync.Mutex
	cmd    *exec.Cmd
	done   chan struct{}
	client *redis.Client
}

// StartNode starts a redis-server. With shim (from BuildClockShim) the node
// reads the wall clock through it, so SetClock can step it.
func StartNode(t testing.TB, shim string) *Node {
	t.Helper()
	n := &Node{t: t, bin: redistest.Binary(t), dir: t.TempDir(), shim: shim}
	if shim != "" {
		n.clock = filepath.Join(n.dir, "clock")
		if err := os.WriteFile(n.clock, make([]byte, 8), 0o644); err != nil {
			t.Fatalf("chaos: clock file: %v", err)
		}
	}
	var err error
	for range 5 { // a free port can be taken between our probe and Redis's bind
		n.port = redistest.FreePort(t)
		if err = n.start(); err == nil {
			t.Cleanup(n.Kill)
			n.client = redis.NewClient(&redis.Options{
				Addr: n.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond,
				ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond,
				ContextTimeoutEnabled: true,
			})
			t.Cleanup(func() { _ = n.client.Close() })
			return n
		}
	}
	t.Fatalf("chaos: could not start redis-server: %v", err)
	return nil
}

// Addr is the node's host:port.
func (n *Node) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(n.port)) }

// Client is a go-redis client straight to the node, for the checkers and
// for faults that act on data (never through a gateway's proxy).
func (n *Node) Client() *redis.Client { return n.client }

// Kill stops the node with SIGKILL, as a crash would. Safe to call twice.
func (n *Node) Kill() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies too, but be sure it is reaped
	_ = n.cmd.Process.Kill()
	<-n.done
	n.cmd = nil
}

// Restart kills the node and starts it again at once on the same port,
// empty: it had no persistence. It keeps its clock offset.
func (n *Node) Restart() {
	n.t.Helper()
	n.Kill()
	n.Start()
}

// Start starts a killed node again, empty, on its port.
func (n *Node) Start() {
	n.t.Helper()
	var err error
	for range 100 { // the old socket may linger briefly
		if err = n.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	n.t.Fatalf("chaos: restart redis-server on port %d: %v", n.port, err)
}

// Pause stops the node with SIGSTOP: it keeps its sockets but answers
// nothing, like a long GC pause or a frozen VM; its keys keep expiring by
// the wall clock while it is stopped. It returns once the node has stopped.
func (n *Node) Pause() {
	n.signal(syscall.SIGSTOP)
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	if cmd != nil {
		waitStopped(cmd.Process.Pid)
	}
}

// Resume continues a paused node.
func (n *Node) Resume() { n.signal(syscall.SIGCONT) }

// SetClock steps the node's wall clock to the host's plus offset, at once,
// as an NTP step or an operator would: keys expire by the new clock and
// Redis TIME (which seeds fences) reads it. The node must run on the shim.
func (n *Node) SetClock(offset time.Duration) {
	n.t.Helper()
	if n.shim == "" {
		n.t.Fatal("chaos: SetClock on a node started without the clock shim")
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(int64(offset)))
	f, err := os.OpenFile(n.clock, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(b[:], 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		n.t.Fatalf("chaos: set clock: %v", err)
	}
}

// Time is the node's clock, from Redis TIME.
func (n *Node) Time(ctx context.Context) (time.Time, error) {
	return n.client.Time(ctx).Result()
}

func (n *Node) signal(sig syscall.Signal) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		_ = n.cmd.Process.Signal(sig)
	}
}

func (n *Node) start() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := new(bytes.Buffer)
	cmd := exec.Command(n.bin,
		"--port", strconv.Itoa(n.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", n.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	cmd.Env = os.Environ()
	if n.shim != "" {
		cmd.Env = append(cmd.Env, "LD_PRELOAD="+n.shim, "CLOCKSHIM_FILE="+n.clock)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if redistest.Ping(n.Addr()) {
			n.cmd, n.done = cmd, done
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("redis-server on port %d exited: %s", n.port, strings.TrimSpace(out.String()))
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("redis-server on port %d did not answer PING in 10s: %s", n.port, strings.TrimSpace(out.String()))
}

// JumpKeys emulates a forward step of a node's clock by d on the keys
// matching pattern: each key with a TTL loses d of it, and is gone when it
// had less. That is what a step does to expiry; unlike SetClock it needs no
// shim and can be aimed at one lease, but it leaves Redis TIME alone.
func JumpKeys(ctx context.Context, c *redis.Client, pattern string, d time.Duration) error {
	const script = `
local gone = 0
for _, k in ipairs(redis.call('KEYS', ARGV[2])) do
  local p = redis.call('PTTL', k)
  if p > 0 then
    if p <= tonumber(ARGV[1]) then
      redis.call('DEL', k)
      gone = gone + 1
    else
      redis.call('PEXPIRE', k, p - tonumber(ARGV[1]))
    end
  end
end
return gone`
	return c.Eval(ctx, script, nil, d.Milliseconds(), pattern).Err()
}
