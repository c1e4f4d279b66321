//go:build unix

// Package nginx_test runs examples/nginx/nginx.conf.template in a real
// nginx, in front of a gateway started in-process, and checks what a client
// of that nginx sees.
package nginx_test

import (
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
)

// The client's address: another loopback address than nginx's trusted
// 127.0.0.1, so the test shows the client, not the proxy, being counted.
// Linux answers on all of 127.0.0.0/8.
const clientIP = "127.0.0.2"

func TestNginxAuthRequest(t *testing.T) {
	bin := nginxBinary(t)
	g := apitest.Start(t, map[string]string{
		"LOCKGW_RATE_LIMIT_WINDOW": "1s",
		"LOCKGW_TRUSTED_PROXIES":   "127.0.0.1/32",
	})
	base := startNginx(t, bin, strings.TrimPrefix(g.URL, "http://"))
	c := client(t)

	// The requests after the first are refused only within its window:
	// on a loaded machine they can come after it (the PUT was admitted 200
	// in a make test beside two CPU burners), and then an admission is
	// right. A refusal is checked whenever the request was sent within a
	// second of the first; an admission after that starts over, in a new
	// window, at most three times.
	var r response
	var retry int
	for attempt := 1; ; attempt++ {
		// The first request of the window reaches the upstream, with the quota.
		sent := time.Now()
		r = get(t, c, "GET", base+"/", nil)
		require.Equal(t, http.StatusOK, r.status, "body: %s", r.body)
		assert.Equal(t, "hello\n", string(r.body))
		assert.Equal(t, `"1-per-1";q=1;w=1`, r.header.Get("RateLimit-Policy"))
		assert.Equal(t, `"1-per-1";r=0;t=1`, r.header.Get("RateLimit"))
		windowOver := func(r response) bool {
			return r.status == http.StatusOK && time.Since(sent) >= time.Second && attempt < 3
		}

		// The second is refused by nginx, as the gateway would refuse it.
		r = get(t, c, "GET", base+"/", nil)
		if windowOver(r) {
			t.Logf("attempt %d: the second request came after the window", attempt)
			time.Sleep(time.Second)
			continue
		}
		retry = requireRateLimited(t, r)

		// A body does not stall the check, and a forged X-Forwarded-For
		// does not make the client someone else: nginx overwrites it.
		r = get(t, c, "PUT", base+"/upload", strings.NewReader(`{"x":1}`),
			"Content-Type", "application/json", "X-Forwarded-For", "203.0.113.9")
		if windowOver(r) {
			t.Logf("attempt %d: the PUT came after the window", attempt)
			time.Sleep(time.Second)
			continue
		}
		requireRateLimited(t, r)
		break
	}

	// Retry-After is honest: after it, the client is admitted again.
	time.Sleep(time.Duration(retry) * time.Second)
	r = get(t, c, "GET", base+"/", nil)
	require.Equal(t, http.StatusOK, r.status, "after Retry-After: %s", r.body)
	assert.Equal(t, "hello\n", string(r.body))

	// With the gateway gone, the example fails closed with a 503 problem
	// rather than nginx's bare 500.
	require.NoError(t, g.Stop())
	r = get(t, c, "GET", base+"/", nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body: %s", r.body)
	assert.Equal(t, "1", r.header.Get("Retry-After"))
	assert.Equal(t, "backend-unavailable", problemType(t, r))
}

var rateLimit = regexp.MustCompile(`^"1-per-1";r=0;t=([0-9]+)$`)

// requireRateLimited checks a refusal as nginx sends it and returns its
// Retry-After.
func requireRateLimited(t *testing.T, r response) int {
	t.Helper()
	require.Equal(t, http.StatusTooManyRequests, r.status, "body: %s", r.body)
	retry, err := strconv.Atoi(r.header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", r.header.Get("Retry-After"))
	assert.GreaterOrEqual(t, retry, 1)
	assert.LessOrEqual(t, retry, 1, "the window is 1s")
	assert.Equal(t, `"1-per-1";q=1;w=1`, r.header.Get("RateLimit-Policy"))
	m := rateLimit.FindStringSubmatch(r.header.Get("RateLimit"))
	require.NotNil(t, m, "RateLimit %q", r.header.Get("RateLimit"))
	assert.Equal(t, strconv.Itoa(retry), m[1], "RateLimit's t is Retry-After")
	assert.Equal(t, "no-store", r.header.Get("Cache-Control"))
	assert.Equal(t, "rate-limited", problemType(t, r))
	return retry
}

// problemType checks r's body against openapi.yaml's Problem schema and
// returns its type slug.
func problemType(t *testing.T, r response) string {
	t.Helper()
	require.Equal(t, "application/problem+json", r.header.Get("Content-Type"))
	var v map[string]any
	require.NoError(t, json.Unmarshal(r.body, &v), "body: %s", r.body)
	doc, _ := apitest.Spec(t)
	require.NoError(t, doc.Components.Schemas["Problem"].Value.VisitJSON(v), "body: %s", r.body)
	assert.Equal(t, float64(r.status), v["status"])
	assert.Equal(t, r.header.Get("X-Request-Id"), v["request_id"])
	typ, _ := v["type"].(string)
	return strings.TrimPrefix(typ, "https://lockgateway.dev/problems/")
}

type response struct {
	status int
	header http.Header
	body   []byte
}

func get(t *testing.T, c *http.Client, method, url string, body io.Reader, headers ...string) response {
	t.Helper()
	req, err := http.NewRequest(method, url, body)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp.StatusCode, resp.Header, b}
}

// client connects from clientIP, one connection per request.
func client(t *testing.T) *http.Client {
	t.Helper()
	l, err := net.Listen("tcp", clientIP+":0")
	if err != nil {
		t.Fatalf("this test sends requests from %s, which this machine does not have (Linux has all of 127.0.0.0/8; on macOS: sudo ifconfig lo0 alias %s): %v", clientIP, clientIP, err)
	}
	l.Close()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(clientIP)}, Timeout: 5 * time.Second}
	return &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true},
	}
}

// nginxBinary finds nginx: $NGINX, then PATH, then where packages put it
// (Debian's is /usr/sbin/nginx, often not on a user's PATH).
func nginxBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs nginx: runs in make test, not with -short")
	}
	if p := os.Getenv("NGINX"); p != "" {
		return p
	}
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	for _, p := range []string{"/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"} {
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p
		}
	}
	t.Fatal("nginx not found (looked at $NGINX, PATH, /usr/sbin, /usr/local/sbin). " +
		"`make test` installs it when run as root; otherwise: sudo apt-get install -y nginx " +
		"(Debian/Ubuntu; it needs the auth_request module, which Debian's nginx has), " +
		"or set NGINX=/path/to/nginx")
	return ""
}

// startNginx renders the template for free loopback ports and a prefix
// directory of its own, runs nginx in the foreground as one process, and
// stops it when the test ends. It returns nginx's base URL.
func startNginx(t *testing.T, bin, gateway string) string {
	t.Helper()
	return startNginxEdited(t, bin, gateway, func(conf string) string { return conf })
}

// startNginxEdited is startNginx with the template changed by edit first:
// for a control that shows what a test catches.
func startNginxEdited(t *testing.T, bin, gateway string, edit func(conf string) string) string {
	t.Helper()
	b, err := os.ReadFile("nginx.conf.template")
	require.NoError(t, err)
	tmpl := edit(string(b))
	// A port found free can be taken before nginx binds it; then try others.
	for range 5 {
		dir := t.TempDir()
		listen, demo := freeAddr(t), freeAddr(t)
		conf := strings.NewReplacer(
			"${LISTEN}", listen,
			"${LOCKGATEWAY}", gateway,
			"${DEMO_UPSTREAM}", demo,
		).Replace(tmpl)
		require.NotContains(t, conf, "${", "a placeholder the test does not fill")
		confPath := filepath.Join(dir, "nginx.conf")
		require.NoError(t, os.WriteFile(confPath, []byte(conf), 0o644))

		// -p: relative paths in the config (pid, logs, temp) are in dir.
		// -e: the error log from the start, not the compiled-in path.
		// No daemon, no master: one process, ours to stop; and as root
		// no worker switching to another user.
		var out apitest.SyncBuffer
		cmd := exec.Command(bin, "-p", dir+"/", "-c", confPath, "-e", filepath.Join(dir, "error.log"),
			"-g", "daemon off; master_process off;")
		cmd.Stdout, cmd.Stderr = &out, &out
		require.NoError(t, cmd.Start())
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()

		logs := func() string {
			b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			return out.String() + string(b)
		}
		// Both of the config's listen addresses: nginx binds them one by
		// one and retries a taken one for seconds, the first already
		// accepting connections (a loaded CI run sent its request to
		// such an nginx, which then gave up on the demo's port and quit).
		err := waitListening(listen, exited)
		if err == nil {
			err = waitListening(demo, exited)
		}
		if err != nil {
			if !errors.Is(err, errExited) {
				_ = cmd.Process.Kill()
				<-exited
			}
			if strings.Contains(logs(), "Address already in use") {
				continue
			}
			t.Fatalf("nginx did not start: %v\n%s", err, logs())
		}
		t.Cleanup(func() {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(5 * time.Second):
				_ = cmd.Process.Kill()
				<-exited
			}
			if t.Failed() {
				t.Logf("nginx logs:\n%s", logs())
			}
		})
		return "http://" + listen
	}
	t.Fatal("no free ports for nginx after 5 tries")
	return ""
}

var errExited = errors.New("nginx exited")

// waitListening waits until addr accepts connections, or nginx exits.
func waitListening(addr string, exited <-chan error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case err := <-exited:
			return errors.Join(errExited, err)
		default:
		}
		if conn, err := net.DialTimeout("tcp", addr, 100*time.Millisecond); err == nil {
			conn.Close()
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("nginx did not listen within 10s")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
