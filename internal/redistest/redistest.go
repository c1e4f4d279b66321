// Package redistest starts and controls real redis-server processes for the
// tests, the chaos harness and the benchmark: each on a free loopback port,
// without persistence, with --dir in a folder of its own, killed when the
// test (or the caller) is done. It never touches a Redis it did not start
// and never uses port 6379.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Options says how to run a server. The zero value is what Start uses.
type Options struct {
	// Bin is the redis-server to run; "" finds one (FindBinary).
	Bin string
	// Dir is the server's --dir, a folder of its own; StartOptions makes
	// one in the test's temporary folder when it is "", Run needs one.
	Dir string
	// ClockShim is a library from BuildClockShim to preload: the server
	// then reads the wall clock through it, so SetClock can step it.
	ClockShim string
	// Output, when set, also receives the server's stdout and stderr.
	Output io.Writer
	// Config, when set, is a configuration file passed before every other
	// argument: Sentinel needs a file of its own that it can rewrite.
	Config string
	// DieWithParent kills the server when the process that started it
	// dies, even by SIGKILL (Linux), for tools that are not tests.
	DieWithParent bool
	// Args are more redis-server arguments, after the ones every server
	// gets (StartCluster passes the cluster ones).
	Args []string

	// port picks the port to try; LoopbackPort when nil. A cluster node
	// needs its bus port (port+10000) free too.
	port func() (int, error)
}

// Server is one redis-server process.
type Server struct {
	t     testing.TB // nil for servers from Run
	opts  Options
	port  int
	clock string // the file holding the clock shim's offset; "" without it

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited

	claim *os.File // the port's claim (claimPort), held across restarts
}

// Start starts a redis-server on a free loopback port and stops it when the
// test ends. It fails the test, saying how to install Redis, when no
// redis-server binary can be found.
func Start(t testing.TB) *Server {
	t.Helper()
	return StartOptions(t, Options{})
}

// StartOptions is Start with options.
func StartOptions(t testing.TB, opts Options) *Server {
	t.Helper()
	skipShort(t)
	if opts.Bin == "" {
		opts.Bin = Binary(t)
	}
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	s, err := Run(opts)
	if err != nil {
		t.Fatalf("redistest: could not start redis-server: %v", err)
	}
	s.t = t
	t.Cleanup(func() {
		if s.claim != nil {
			_ = s.claim.Close() // after Kill, registered below and run first
		}
	})
	t.Cleanup(s.Kill)
	return s
}

// Run starts a redis-server on a free loopback port for a caller that is
// not a test, which must Kill it (and close any Client) when done. The
// methods that would fail a test (Start, Restart, Fill, SetClock) panic
// instead on such a server.
func Run(opts Options) (*Server, error) {
	if opts.Bin == "" {
		bin, err := FindBinary()
		if err != nil {
			return nil, err
		}
		opts.Bin = bin
	}
	if opts.Dir == "" {
		return nil, errors.New("redistest: Run needs Options.Dir")
	}
	s := &Server{opts: opts}
	if opts.ClockShim != "" {
		s.clock = filepath.Join(opts.Dir, "clock")
		if err := os.WriteFile(s.clock, make([]byte, 8), 0o644); err != nil {
			return nil, fmt.Errorf("redistest: clock file: %w", err)
		}
	}
	pick := opts.port
	if pick == nil {
		pick = LoopbackPort
	}
	var err error
	for range 20 { // a free port can be taken between our probe and Redis's bind, or claimed
		if s.port, err = pick(); err != nil {
			return nil, err
		}
		claim, ok := claimPort(s.port)
		if !ok {
			err = fmt.Errorf("port %d: claimed by another server", s.port)
			continue
		}
		if err = s.start(); err == nil {
			s.claim = claim // held till the process ends, or StartOptions's test
			return s, nil
		}
		if claim != nil {
			_ = claim.Close()
		}
	}
	return nil, err
}

// ErrNoBinary is FindBinary's error when no redis-server can be found.
var ErrNoBinary = errors.New("redistest: redis-server not found on PATH")

// FindBinary returns the redis-server to run: $REDIS_SERVER, or the one on
// PATH.
func FindBinary() (string, error) {
	if bin := os.Getenv("REDIS_SERVER"); bin != "" {
		return bin, nil
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return "", ErrNoBinary
	}
	return bin, nil
}

// skipShort skips a test that needs a real Redis under go test -short,
// the layer that needs only Go (CONTRIBUTING.md, "Tests"); make test runs
// it. Every test that starts a server comes through here (Binary or
// StartOptions), so none of them fails for want of redis-server there.
func skipShort(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs redis-server: runs in make test, not with -short")
	}
}

// Binary is FindBinary for tests: it fails the test, saying how to get a
// redis-server, when there is none. With -short it skips the test instead:
// that layer runs without real processes.
func Binary(t testing.TB) string {
	t.Helper()
	skipShort(t)
	bin, err := FindBinary()
	if err != nil {
		t.Fatal("redistest: redis-server not found on PATH. These tests run a real Redis. " +
			"Run `make test` (it installs Debian's redis-server package when run as root), " +
			"or install it yourself: `sudo apt-get install redis-server` / `brew install redis`, " +
			"or point REDIS_SERVER at a redis-server binary.")
	}
	return bin
}

// Addr is the server's host:port.
func (s *Server) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)) }

// URL is the server's redis:// URL, as LOCKGW_REDIS_URL takes it.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Client returns a new go-redis client for the server, closed when the test
// ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1, MaintNotificationsConfig: noMaint()})
	if s.t != nil {
		s.t.Cleanup(func() { _ = c.Close() })
	}
	return c
}

// Kill stops the server with SIGKILL, as a crash would. Safe to call twice.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies too, but be sure it is reaped
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart kills the server and starts it again at once on the same port,
// empty: it had no persistence, like a Redis node that crashed and came
// back. It keeps its clock offset.
func (s *Server) Restart() {
	s.helper()
	s.Kill()
	s.Start()
}

// Start starts a killed server again, empty, on its port.
func (s *Server) Start() {
	s.helper()
	var err error
	for range 100 { // the old socket may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.fatalf("redistest: restart on port %d: %v", s.port, err)
}

// Pause stops the process with SIGSTOP: it keeps its sockets but answers
// nothing, like a node in a long GC pause or a frozen VM; its keys keep
// expiring by the wall clock while it is stopped. It returns once the
// process has stopped.
func (s *Server) Pause() {
	s.signal(syscall.SIGSTOP)
	s.mu.Lock()
	cmd := s.cmd
	s.mu.Unlock()
	if cmd != nil {
		WaitStopped(cmd.Process.Pid)
	}
}

// Resume continues a paused process.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil {
		_ = s.cmd.Process.Signal(sig)
	}
}

// CommandCalls returns how many times each command ran, from INFO
// commandstats (lowercase names, e.g. "evalsha", "get").
func (s *Server) CommandCalls(ctx context.Context) (map[string]int64, error) {
	info, err := s.Client().Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	calls := make(map[string]int64)
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		// cmdstat_get:calls=3,usec=12,...
		name, rest, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "cmdstat_"), ":calls=")
		if !ok {
			continue
		}
		n, _, _ := strings.Cut(rest, ",")
		calls[name], _ = strconv.ParseInt(n, 10, 64)
	}
	return calls, nil
}

// Fill limits the server to maxmemory (e.g. "8mb") with maxmemory-policy
// noeviction, as docs/safety.md advises for lock nodes, and fills it with
// junk until it refuses writes: out of memory. It then lowers the limit
// to half of what is used, so that Redis stays out of memory.
func (s *Server) Fill(maxmemory string) {
	s.helper()
	ctx := context.Background()
	c := s.Client()
	if err := c.ConfigSet(ctx, "maxmemory", maxmemory).Err(); err != nil {
		s.fatalf("redistest: CONFIG SET maxmemory: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		s.fatalf("redistest: CONFIG SET maxmemory-policy: %v", err)
	}
	// Refused commands count while they sit in the query buffer, and
	// Redis is back under the limit once it has dropped them: fill in
	// batches of 100 KB, then one small value at a time, so what is left
	// is less than any lock script needs.
	i := 0
	for _, batch := range []struct {
		n    int
		junk string
	}{{100, strings.Repeat("x", 1000)}, {1, "x"}} {
		for ; ; i += batch.n {
			if i > 10_000_000 {
				s.fatalf("redistest: junk did not fill Redis to maxmemory %s", maxmemory)
			}
			pipe := c.Pipeline()
			for j := range batch.n {
				pipe.Set(ctx, fmt.Sprintf("redistest:fill:%d", i+j), batch.junk, 0)
			}
			_, err := pipe.Exec(ctx)
			if err == nil {
				continue
			}
			if !strings.HasPrefix(err.Error(), "OOM") {
				s.fatalf("redistest: filling Redis: %v", err)
			}
			break
		}
	}
	// Redis refuses a write only while its memory is over the limit, and
	// it dips back under whenever a client's buffers are freed: a test
	// that found Redis full once found a write accepted a moment later
	// (server.TestFullRedis, on a loaded machine). A limit below what is
	// used now keeps every write refused, whatever the buffers do.
	info, err := c.InfoMap(ctx, "memory").Result()
	if err != nil {
		s.fatalf("redistest: INFO memory: %v", err)
	}
	used, err := strconv.ParseInt(info["Memory"]["used_memory"], 10, 64)
	if err != nil {
		s.fatalf("redistest: INFO memory's used_memory: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used/2, 10)).Err(); err != nil {
		s.fatalf("redistest: CONFIG SET maxmemory: %v", err)
	}
}

func (s *Server) helper() {
	if s.t != nil {
		s.t.Helper()
	}
}

// fatalf fails the test; a server from Run has none, and panics instead.
func (s *Server) fatalf(format string, args ...any) {
	if s.t == nil {
		panic(fmt.Sprintf(format, args...))
	}
	s.t.Helper()
	s.t.Fatalf(format, args...)
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := new(bytes.Buffer)
	cmd := exec.Command(s.opts.Bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.opts.Dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	cmd.Args = append(cmd.Args, s.opts.Args...)
	if s.clock != "" {
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+s.opts.ClockShim, "CLOCKSHIM_FILE="+s.clock)
	}
	if s.opts.Config != "" { // redis-server reads a configuration file only as its first argument
		cmd.Args = slices.Insert(cmd.Args, 1, s.opts.Config)
	}
	var w io.Writer = out
	if s.opts.Output != nil {
		w = io.MultiWriter(out, s.opts.Output)
	}
	cmd.Stdout, cmd.Stderr = w, w
	if s.opts.DieWithParent {
		dieWithParent(cmd)
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()

	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if Ping(s.Addr()) {
			s.cmd, s.done = cmd, done
			return nil
		}
		select {
		case <-done: // exited: most likely the port was taken
			return fmt.Errorf("redis-server on port %d exited: %s", s.port, strings.TrimSpace(out.String()))
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = cmd.Process.Kill()
	<-done
	return fmt.Errorf("redis-server on port %d did not answer PING in 10s: %s", s.port, strings.TrimSpace(out.String()))
}

// Ping sends one PING to addr and reports whether +PONG came back.
func Ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(500 * time.Millisecond))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && strings.HasPrefix(line, "+PONG")
}

// LoopbackPort returns a loopback port that was free a moment ago. It never
// returns the well-known ports of Redis, etcd or the gateway (6379, 2379,
// 2380, 8080), so nothing can talk to a server it did not start.
func LoopbackPort() (int, error) {
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, fmt.Errorf("redistest: free port: %w", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		switch port {
		case 6379, 2379, 2380, 8080:
			continue
		}
		return port, nil
	}
	return 0, errors.New("redistest: no free loopback port")
}

// FreePort is LoopbackPort for tests: it fails the test when there is none.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := LoopbackPort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// UsedMemory is Redis's used_memory (INFO memory) as rdb sees it.
func UsedMemory(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatalf("redistest: INFO memory: %v", err)
	}
	for line := range strings.Lines(info) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("redistest: used_memory %q: %v", v, err)
			}
			return n
		}
	}
	t.Fatal("redistest: no used_memory in INFO memory")
	return 0
}
