// Package redistest starts real redis-server processes for tests: each on a
// free loopback port, without persistence, killed when the test ends. It never
// touches a Redis it did not start and never uses port 6379.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server process started by a test.
type Server struct {
	t    testing.TB
	bin  string
	port int
	dir  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
}

// Start starts a redis-server on a free loopback port and stops it when the
// test ends. It fails the test, saying how to install Redis, when no
// redis-server binary can be found.
func Start(t testing.TB) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), dir: t.TempDir()}
	var err error
	for range 5 { // a free port can be taken between our probe and Redis's bind
		s.port = FreePort(t)
		if err = s.start(); err == nil {
			t.Cleanup(s.Kill)
			return s
		}
	}
	t.Fatalf("redistest: could not start redis-server: %v", err)
	return nil
}

// Binary returns the redis-server to run: $REDIS_SERVER, or the one on PATH.
func Binary(t testing.TB) string {
	t.Helper()
	if bin := os.Getenv("REDIS_SERVER"); bin != "" {
		return bin
	}
	bin, err := exec.LookPath("redis-server")
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

// Client returns a go-redis client for the server, closed when the test ends.
func (s *Server) Client() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), MaxRetries: -1})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill stops the server with SIGKILL, as a crash would. Safe to call twice.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.done
	s.cmd = nil
}

// Restart starts the server again on the same port, empty: it had no
// persistence, like a Redis node that crashed and came back.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	var err error
	for range 50 { // the old socket may linger briefly
		if err = s.start(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatalf("redistest: restart on port %d: %v", s.port, err)
}

// Pause stops the process with SIGSTOP: it keeps its sockets but answers
// nothing, like a node in a long GC pause or a frozen VM.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

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
// noeviction, as the README advises for lock nodes, and fills it with
// junk until it refuses writes: out of memory.
func (s *Server) Fill(maxmemory string) {
	s.t.Helper()
	ctx := context.Background()
	c := s.Client()
	if err := c.ConfigSet(ctx, "maxmemory", maxmemory).Err(); err != nil {
		s.t.Fatalf("redistest: CONFIG SET maxmemory: %v", err)
	}
	if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		s.t.Fatalf("redistest: CONFIG SET maxmemory-policy: %v", err)
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
				s.t.Fatalf("redistest: junk did not fill Redis to maxmemory %s", maxmemory)
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
				s.t.Fatalf("redistest: filling Redis: %v", err)
			}
			break
		}
	}
}

func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := new(bytes.Buffer)
	cmd := exec.Command(s.bin,
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--save", "",
		"--appendonly", "no",
		"--dir", s.dir,
		"--daemonize", "no",
		"--loglevel", "warning",
	)
	cmd.Stdout, cmd.Stderr = out, out
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

// FreePort returns a free loopback port, never 6379.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 20 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("redistest: free port: %v", err)
		}
		port := l.Addr().(*net.TCPAddr).Port
		_ = l.Close()
		if port != 6379 {
			return port
		}
	}
	t.Fatal("redistest: no free port")
	return 0
}
