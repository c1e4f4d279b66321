package chaos

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockgateway/lockgateway/internal/redistest"
)

// BuildGateway builds cmd/lockgateway into dir and returns the binary.
func BuildGateway(dir string) (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "lockgateway")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/lockgateway")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build ./cmd/lockgateway: %v: %s", err, out)
	}
	return bin, nil
}

// ModuleRoot is the directory of the module's go.mod, found from the
// working directory up.
func ModuleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("chaos: no go.mod above the working directory")
		}
		dir = parent
	}
}

// Gateway is a lockgateway process started by a test.
type Gateway struct {
	URL string // http://127.0.0.1:port
	t   testing.TB
	log string

	mu      sync.Mutex
	cmd     *exec.Cmd
	done    chan struct{}
	exitErr error
	killed  bool // by Kill: its exit is no failure
}

// StartGateway runs bin with the LOCKGW_* settings in env (LOCKGW_ADDR is
// chosen here) on a free loopback port, waits until it serves /healthz, and
// stops it when the test ends.
func StartGateway(t testing.TB, bin string, env map[string]string) *Gateway {
	t.Helper()
	for range 5 { // a free port can be taken before the gateway binds it
		if g := startGateway(t, bin, env); g != nil {
			t.Cleanup(func() {
				if err := g.Stop(); err != nil {
					t.Errorf("gateway %s: %v\n%s", g.URL, err, g.Logs())
				}
			})
			return g
		}
	}
	t.Fatal("chaos: no free port for a gateway after 5 tries")
	return nil
}

func startGateway(t testing.TB, bin string, env map[string]string) *Gateway {
	t.Helper()
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(redistest.FreePort(t)))
	log, err := os.CreateTemp(t.TempDir(), "gateway-*.log")
	if err != nil {
		t.Fatalf("chaos: gateway log: %v", err)
	}
	defer log.Close()
	cmd := exec.Command(bin)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "LOCKGW_ADDR=" + addr}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatalf("chaos: start gateway: %v", err)
	}
	g := &Gateway{URL: "http://" + addr, t: t, log: log.Name(), cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		g.mu.Lock()
		g.exitErr = err
		g.mu.Unlock()
		close(g.done)
	}()

	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := hc.Get(g.URL + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		select {
		case <-g.done:
			if strings.Contains(g.Logs(), "address already in use") {
				return nil
			}
			t.Fatalf("chaos: gateway exited before serving: %v\n%s", g.exitErr, g.Logs())
		case <-time.After(10 * time.Millisecond):
		}
	}
	g.Kill()
	t.Fatalf("chaos: gateway did not answer /healthz in 10s\n%s", g.Logs())
	return nil
}

// Ready waits until /readyz answers 200: every node the gateway needs has
// answered it once (so it knows each node's run_id).
func (g *Gateway) Ready(timeout time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for {
		resp, err := hc.Get(g.URL + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("gateway %s not ready after %v (last: %v)", g.URL, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Pause stops the gateway process with SIGSTOP, wherever it is: in the
// middle of a request, between a node's reply and its answer. It returns
// once every thread of the process has stopped: kill(2) only queues the
// signal, and a thread still running could otherwise finish a request.
func (g *Gateway) Pause() {
	g.signal(syscall.SIGSTOP)
	redistest.WaitStopped(g.cmd.Process.Pid)
}

// Resume continues a paused gateway.
func (g *Gateway) Resume() { g.signal(syscall.SIGCONT) }

// Kill stops the gateway with SIGKILL.
func (g *Gateway) Kill() {
	g.mu.Lock()
	g.killed = true
	g.mu.Unlock()
	g.signal(syscall.SIGKILL)
	<-g.done
}

// Stop sends SIGTERM (after SIGCONT, in case it is paused) and waits up to
// 20 s for a clean exit; it returns what went wrong, if anything. Safe to
// call twice.
func (g *Gateway) Stop() error {
	g.signal(syscall.SIGCONT)
	g.signal(syscall.SIGTERM)
	select {
	case <-g.done:
	case <-time.After(20 * time.Second):
		g.Kill()
		return errors.New("did not stop within 20s of SIGTERM")
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.exitErr != nil && !g.killed {
		return fmt.Errorf("exit: %w", g.exitErr)
	}
	if strings.Contains(g.logs(), "panic") {
		return errors.New("logged a panic")
	}
	return nil
}

// Logs returns what the gateway wrote so far.
func (g *Gateway) Logs() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.logs()
}

func (g *Gateway) logs() string {
	b, _ := os.ReadFile(g.log)
	return string(b)
}

func (g *Gateway) signal(sig syscall.Signal) {
	select {
	case <-g.done:
	default:
		_ = g.cmd.Process.Signal(sig)
	}
}
