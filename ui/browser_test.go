package ui_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
)

// These tests drive the dashboard in a real browser: Debian's headless
// Chromium, through the DevTools protocol (chromedp). A machine without
// one fails them, saying how to get it: the Makefile's deps target
// installs it where missing, as it installs redis-server.

// findChromium returns a Chromium or Chrome binary: LOCKGW_CHROMIUM when
// set, else the first found on PATH or where Debian puts it.
func findChromium(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("needs chromium: runs in make test, not with -short")
	}
	if p := os.Getenv("LOCKGW_CHROMIUM"); p != "" {
		if _, err := exec.LookPath(p); err != nil {
			t.Fatalf("LOCKGW_CHROMIUM=%s: %v; install chromium: apt-get install chromium, or point LOCKGW_CHROMIUM at a Chromium or Chrome binary", p, err)
		}
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	for _, p := range []string{"/usr/bin/chromium", "/usr/lib/chromium/chromium"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	t.Fatal("no headless browser for the dashboard tests: install chromium: apt-get install chromium " +
		"(make deps does it as root), or set LOCKGW_CHROMIUM to a Chromium or Chrome binary")
	return ""
}

// browser is one headless Chromium tab and what its console said.
type browser struct {
	ctx context.Context

	mu       sync.Mutex
	messages []chromedp.ConsoleMessage // errors and uncaught exceptions
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(findChromium(t)),
		chromedp.Headless,
		chromedp.NoSandbox, // root in a container has no user namespace to sandbox in
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 860),
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// Open the tab first, so the console is heard from the page's start.
	require.NoError(t, chromedp.Do(ctx), "start Chromium")
	b := &browser{ctx: ctx}
	messages := chromedp.Console(ctx)
	go func() {
		for m, err := range messages {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.mu.Lock()
				b.messages = append(b.messages, m)
				b.mu.Unlock()
			}
		}
	}()
	return b
}

func (b *browser) errors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for _, m := range b.messages {
		out = append(out, m.String()+" ("+m.URL+")")
	}
	return out
}

func (b *browser) do(t *testing.T, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
	defer cancel()
	require.NoError(t, chromedp.Do(ctx, actions...))
}

// click clicks the element sel selects. The dashboard re-renders its
// tables on every poll, so the node chromedp found can be replaced before
// its click lands ("Could not find node with given id": once in three runs
// on a loaded machine); that click did not happen, and is tried again on
// the new node.
func (b *browser) click(t *testing.T, sel string) {
	t.Helper()
	for try := 1; ; try++ {
		ctx, cancel := context.WithTimeout(b.ctx, 20*time.Second)
		err := chromedp.Do(ctx, chromedp.Click(sel))
		cancel()
		if err == nil || try == 5 || !strings.Contains(err.Error(), "Could not find node with given id") {
			require.NoError(t, err, "click %s", sel)
			return
		}
		t.Logf("click %s: %v; again", sel, err)
		time.Sleep(20 * time.Millisecond)
	}
}

// eval runs a JavaScript expression in the page and returns its value.
func eval[T any](t *testing.T, b *browser, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

// within polls expr in the page until it is true, and returns how long
// that took; it fails the test after limit.
func within(t *testing.T, b *browser, limit time.Duration, expr, what string) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		if eval[bool](t, b, expr) {
			return time.Since(start)
		}
		if time.Since(start) > limit {
			t.Fatalf("the dashboard did not show %s within %v", what, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func row(key string) string { return fmt.Sprintf(`document.querySelector('tr[data-key=%q]')`, key) }

// TestDashboard drives /ui/ over a Redlock gateway of three nodes: the
// page loads with no console error, shows a lock taken through the API
// within a second, with its owner, fence and a TTL counting down and never
// its token, removes it within a second of its release, and marks a node
// down once it is killed.
func TestDashboard(t *testing.T) {
	srvs := []*redistest.Server{redistest.Start(t), redistest.Start(t), redistest.Start(t)}
	var urls []string
	for _, s := range srvs {
		urls = append(urls, s.URL())
	}
	g := apitest.Start(t, map[string]string{
		"LOCKGW_BACKEND":              "redlock",
		"LOCKGW_REDLOCK_URLS":         strings.Join(urls, ","),
		"LOCKGW_REDLOCK_NODE_TIMEOUT": "500ms", // a loaded test machine is not a slow node
		"LOCKGW_UI":                   "true",
	})
	c := apitest.NewClient(g.URL)
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(g.URL+"/ui/"))
	within(t, b, 5*time.Second, `document.querySelectorAll('#nodes tr[data-state="up"]').length === 3`, "three nodes up")
	assert.Equal(t, "ready", eval[string](t, b, `document.getElementById('ready').textContent`))
	assert.Equal(t, "(0)", eval[string](t, b, `document.getElementById('count').textContent`))

	// A lock taken through the API shows within a second.
	key := "dash/nightly-report"
	r := c.Do(t, "PUT", "/locks/"+key, []byte(`{"ttl_ms":60000,"owner":"worker-7"}`), "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, r.Status)
	lease := r.JSON(t)
	took := within(t, b, time.Second, row(key)+` !== null`, "the lock just taken")
	t.Logf("the lock showed %v after its grant", took)
	cells := eval[[]string](t, b, `Array.from(`+row(key)+`.cells, (td) => td.textContent)`)
	require.Len(t, cells, 5)
	assert.Equal(t, key, cells[0])
	assert.Equal(t, "worker-7", cells[1])
	assert.Equal(t, fmt.Sprint(int64(lease["fence"].(float64))), cells[2])
	assert.Equal(t, "0", cells[4], "waiters")
	// The TTL counts down between reads.
	ttl := func() float64 {
		var s float64
		_, err := fmt.Sscanf(eval[string](t, b, row(key)+`.cells[3].textContent`), "%f s", &s)
		require.NoError(t, err)
		return s
	}
	first := ttl()
	assert.InDelta(t, 60, first, 2)
	time.Sleep(300 * time.Millisecond)
	assert.Less(t, ttl(), first, "the TTL counts down")
	// Never the token: not in the page, not in anything it stored.
	token := lease["token"].(string)
	seen := eval[string](t, b, `document.documentElement.outerHTML + JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie`)
	assert.NotContains(t, seen, token)

	// Clicked, it is followed through its watch stream: its grant at once,
	// then an extend the listing could not tell from nothing, then its
	// release.
	b.click(t, `#locks tr[data-key="`+key+`"] td.key`)
	followed := `document.getElementById('follow-events').textContent`
	within(t, b, time.Second, followed+`.includes('acquired')`, "the followed lock's acquired event")
	assert.Equal(t, key, eval[string](t, b, `document.getElementById('follow-key').textContent`))
	require.Equal(t, http.StatusOK, c.Do(t, "PATCH", "/locks/"+key, []byte(`{"ttl_ms":90000}`), "Content-Type", "application/json", "Lock-Token", token).Status)
	within(t, b, time.Second, followed+`.includes('extended')`, "the extend, from the watch stream")

	// Released, it goes within a second, and the events say so.
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", "/locks/"+key, nil, "Lock-Token", token).Status)
	within(t, b, time.Second, followed+`.includes('released')`, "the release, from the watch stream")
	took = within(t, b, time.Second, row(key)+` === null`, "the lock gone after its release")
	t.Logf("the lock went %v after its release", took)
	events := eval[string](t, b, `document.getElementById('events').textContent`)
	assert.Contains(t, events, "acquired "+key)
	assert.Contains(t, events, "released "+key)

	// A semaphore's permits show, held of limit, with their owners.
	r = c.Do(t, "PUT", "/semaphores/dash/exports", []byte(`{"limit":3,"ttl_ms":60000,"owner":"export-1"}`), "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	sem := fmt.Sprintf(`document.querySelector('#semaphores tr[data-key=%q]')`, "dash/exports")
	within(t, b, time.Second, sem+` !== null`, "the semaphore just taken")
	assert.Equal(t, "1 of 3", eval[string](t, b, sem+`.cells[1].textContent`))
	assert.Contains(t, eval[string](t, b, sem+`.cells[2].textContent`), "export-1")
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", "/semaphores/dash/exports", nil, "Lock-Token", r.JSON(t)["token"].(string)).Status)
	within(t, b, time.Second, sem+` === null`, "the semaphore gone after its release")

	// A node killed is marked down.
	srvs[2].Kill()
	took = within(t, b, 5*time.Second, fmt.Sprintf(`document.querySelector('#nodes tr[data-addr=%q]')?.dataset.state === 'down'`, srvs[2].Addr()), "the killed node down")
	t.Logf("the node showed down %v after the kill", took)
	assert.Equal(t, 2, int(eval[float64](t, b, `document.querySelectorAll('#nodes tr[data-state="up"]').length`)))
	assert.Equal(t, "ready", eval[string](t, b, `document.getElementById('ready').textContent`), "two of three still make a quorum")

	if path := os.Getenv("DASHBOARD_SCREENSHOT"); path != "" {
		screenshot(t, b, c, path)
	}
	assert.Empty(t, b.errors(), "console errors")
}

// TestDashboardMarksHolds: a lock a hold's stream keeps (held_by_stream in
// the listing) is marked on the dashboard, and its short TTL is not shown
// as running low, while a lock taken by a plain PUT has no mark and shows
// low; likewise a semaphore's permit held by a stream beside a plain one,
// which alone counts for when the first permit frees itself. The held
// lock goes once its stream closes.
func TestDashboardMarksHolds(t *testing.T) {
	g := apitest.Start(t, map[string]string{"LOCKGW_UI": "true"})
	c := apitest.NewClient(g.URL)
	first := func(events *apitest.Events) apitest.Event {
		t.Helper()
		select {
		case e := <-events.C:
			return e
		case <-time.After(5 * time.Second):
			t.Fatal("no event within 5 s")
			return apitest.Event{}
		}
	}
	// At the gateway's hold TTL (5 s), under the page's 5 s "low" mark.
	held, resp := c.Hold(t, "/locks/dash/held", []byte(`{"owner":"cron"}`))
	require.Nil(t, resp)
	defer held.Close()
	require.Equal(t, "acquired", first(held).Name)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/dash/plain", []byte(`{"ttl_ms":4000,"owner":"cron"}`), apitest.JSON...).Status)
	permit, resp := c.Hold(t, "/semaphores/dash/pool", []byte(`{"limit":2,"owner":"held-permit"}`))
	require.Nil(t, resp)
	defer permit.Close()
	require.Equal(t, "acquired", first(permit).Name)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/semaphores/dash/pool", []byte(`{"limit":2,"ttl_ms":60000,"owner":"plain-permit"}`), apitest.JSON...).Status)

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(g.URL+"/ui/"))
	sem := fmt.Sprintf(`document.querySelector('#semaphores tr[data-key=%q]')`, "dash/pool")
	within(t, b, 3*time.Second, row("dash/held")+` !== null && `+row("dash/plain")+` !== null && `+sem+` !== null`, "the two locks and the semaphore")

	marked := func(sel string) bool { return eval[bool](t, b, sel+`.querySelector('.stream-mark') !== null`) }
	assert.True(t, marked(row("dash/held")+`.cells[0]`), "the held lock is marked")
	assert.False(t, marked(row("dash/plain")), "the plainly taken lock is not")
	assert.Equal(t, "dash/held", eval[string](t, b, row("dash/held")+`.cells[0].firstChild.textContent`), "the key, then the mark")
	lowTTL := func(key string) bool { return eval[bool](t, b, row(key)+`.cells[3].classList.contains('low')`) }
	assert.False(t, lowTTL("dash/held"), "a stream renews the held lock: its short TTL is not running low")
	assert.True(t, lowTTL("dash/plain"), "the plain lock's TTL under 5 s is")
	holder := func(owner string) string {
		return fmt.Sprintf(`Array.from(%s.cells[2].querySelectorAll('.holder')).find((h) => h.textContent.includes(%q))`, sem, owner)
	}
	assert.True(t, marked(holder("held-permit")), "the permit a stream holds is marked")
	assert.False(t, marked(holder("plain-permit")), "the other permit is not")
	var firstFrees float64
	_, err := fmt.Sscanf(eval[string](t, b, sem+`.cells[3].textContent`), "%f s", &firstFrees)
	require.NoError(t, err)
	assert.Greater(t, firstFrees, 30.0, "the first permit to free itself is the plain one (60 s), not the one a stream renews (5 s)")

	held.Close()
	within(t, b, 2*time.Second, row("dash/held")+` === null`, "the held lock gone once its stream closed")
	assert.Empty(t, b.errors(), "console errors")
}

// screenshot populates the dashboard and saves it as a PNG at path
// (DASHBOARD_SCREENSHOT=../docs/dashboard.png go test -run TestDashboard ./ui/).
func screenshot(t *testing.T, b *browser, c *apitest.Client, path string) {
	for i, l := range []struct{ key, owner string }{
		{"billing/invoice-run", "cron@host-3"},
		{"jobs/nightly-report", "worker-7"},
		{"jobs/reindex", "worker-2"},
		{"sku/4711", "checkout-api"},
		{"sku/4712", "checkout-api"},
	} {
		body := fmt.Sprintf(`{"ttl_ms":%d,"owner":%q}`, 20000+i*35000, l.owner)
		require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/"+l.key, []byte(body), "Content-Type", "application/json").Status)
	}
	for i := range 2 {
		body := fmt.Sprintf(`{"limit":3,"ttl_ms":45000,"owner":"export-%d"}`, i+1)
		require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/semaphores/reports/export", []byte(body), "Content-Type", "application/json").Status)
	}
	within(t, b, 2*time.Second, `document.querySelectorAll('#locks tbody tr').length === 5 && document.querySelectorAll('#semaphores tbody tr').length === 1`, "five locks and a semaphore")
	time.Sleep(1500 * time.Millisecond) // past the new rows' highlight
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Clean(path), png, 0o644))
	t.Logf("wrote %s (%d bytes)", path, len(png))
}

// TestDashboardWithAPIKey: under API keys the page asks for a key, lists
// once one is entered, and keeps it nowhere but in its memory: not in the
// page, its address, cookies or storage.
func TestDashboardWithAPIKey(t *testing.T) {
	const key = "ops-key-3c1d9e0b7a5f"
	file := filepath.Join(t.TempDir(), "keys.json")
	users, err := json.Marshal(map[string]any{"users": []map[string]any{{"user": "ops", "key_sha256": sha256Hex(key), "prefixes": []string{"*"}}}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, users, 0o600))
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": file, "LOCKGW_UI": "true", "LOCKGW_RATE_LIMIT_WINDOW": "1s"})
	c := apitest.NewClient(g.URL)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/ops/backup", []byte(`{"owner":"backup"}`),
		"Content-Type", "application/json", "Authorization", "Bearer "+key).Status)
	b := newBrowser(t)

	b.do(t, chromedp.Navigate(g.URL+"/ui/"))
	within(t, b, 3*time.Second, `document.getElementById('message').textContent.includes('needs an API key')`, "that it needs a key")
	b.do(t, chromedp.SendKeys("#apikey", key), chromedp.Click(`#key-form button`))
	within(t, b, 2*time.Second, row("ops/backup")+` !== null`, "the lock, once the key is entered")
	assert.True(t, eval[bool](t, b, `document.getElementById('message').hidden`))
	seen := eval[string](t, b, `document.documentElement.outerHTML + document.getElementById('apikey').value + location.href + JSON.stringify(localStorage) + JSON.stringify(sessionStorage) + document.cookie`)
	assert.NotContains(t, seen, key)

	// The rate limiter's refusals show (one request a second per user).
	time.Sleep(time.Second) // past the first PUT's window
	auth := []string{"Authorization", "Bearer " + key}
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/ops/one", nil, auth...).Status)
	require.Equal(t, http.StatusTooManyRequests, c.Do(t, "PUT", "/locks/ops/two", nil, auth...).Status)
	within(t, b, 5*time.Second, `document.getElementById('ratelimit').textContent.includes('refused 1')`, "the rate limiter's refusal")

	// The 401s before the key came are the browser's network log; nothing
	// else may be an error.
	for _, e := range b.errors() {
		assert.Contains(t, e, "401", "console error")
	}

	// The console check itself hears an error.
	eval[any](t, b, `console.error('probe from the test'), 0`)
	require.Eventually(t, func() bool { return strings.Contains(strings.Join(b.errors(), "\n"), "probe from the test") },
		2*time.Second, 20*time.Millisecond, "the test hears the page's console errors")
}

func sha256Hex(s string) string {
	d := sha256.Sum256([]byte(s))
	return hex.EncodeToString(d[:])
}
