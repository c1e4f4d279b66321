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

// nextRead is how long a change may take to show in the page's lists, by
// its schedule (docs/operations.md, "Dashboard"): it reads again 500 ms
// after a listing's answer, or four times as long as that listing took
// (at most 5 s), and the next listing takes about as long again. What the
// last listing took is the page's own Resource Timing of it; half a
// second more covers rendering and within's polling. On a quiet machine
// about a second; on a loaded one, where listings take longer, what the
// page promises, not less.
func nextRead(t *testing.T, b *browser) time.Duration {
	t.Helper()
	ms := eval[float64](t, b, `Math.max(0, ...performance.getEntriesByType('resource')
		.filter((e) => /\/(locks|semaphores)\?/.test(e.name)).slice(-2).map((e) => e.duration))`)
	took := time.Duration(ms * float64(time.Millisecond))
	return min(max(500*time.Millisecond, 4*took), 5*time.Second) + took + 500*time.Millisecond
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
	// The list renders after the nodes: wait for it, as a viewer would.
	within(t, b, 5*time.Second, `document.getElementById('count').textContent === '(0)'`, "no locks listed")

	// A lock taken through the API shows by the page's next read: within
	// about a second on a quiet machine.
	key := "dash/nightly-report"
	limit := nextRead(t, b)
	sent := time.Now()
	r := c.Do(t, "PUT", "/locks/"+key, []byte(`{"ttl_ms":60000,"owner":"worker-7"}`), "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, r.Status)
	lease := r.JSON(t)
	took := within(t, b, limit, row(key)+` !== null`, "the lock just taken")
	t.Logf("the lock showed %v after its grant (the page's schedule allowed %v)", took, limit)
	// Without API keys nobody may release by force: no button.
	within(t, b, time.Second, `document.body.dataset.access === 'known'`, "what the page may do")
	assert.Zero(t, eval[float64](t, b, `document.querySelectorAll('button.force').length`), "no release button without API keys")
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
	// The page counts down from the time left the gateway read: at most
	// the 60 s asked for, and at least that less the time since the PUT
	// went out (however slow a loaded machine made the reads since), less
	// Redlock's drift allowance (1% and 2 ms) and the display's rounding
	// to a tenth of a second.
	assert.LessOrEqual(t, first, 60.0)
	assert.GreaterOrEqual(t, first, 60-(602*time.Millisecond+time.Since(sent)).Seconds()-0.06)
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

	// Released, it goes by the page's next read, and the events say so.
	limit = nextRead(t, b)
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", "/locks/"+key, nil, "Lock-Token", token).Status)
	within(t, b, time.Second, followed+`.includes('released')`, "the release, from the watch stream")
	took = within(t, b, limit, row(key)+` === null`, "the lock gone after its release")
	t.Logf("the lock went %v after its release", took)
	events := eval[string](t, b, `document.getElementById('events').textContent`)
	assert.Contains(t, events, "acquired "+key)
	assert.Contains(t, events, "released "+key)

	// A semaphore's permits show, held of limit, with their owners.
	limit = nextRead(t, b)
	r = c.Do(t, "PUT", "/semaphores/dash/exports", []byte(`{"limit":3,"ttl_ms":60000,"owner":"export-1"}`), "Content-Type", "application/json")
	require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
	sem := fmt.Sprintf(`document.querySelector('#semaphores tr[data-key=%q]')`, "dash/exports")
	within(t, b, limit, sem+` !== null`, "the semaphore just taken")
	assert.Equal(t, "1 of 3", eval[string](t, b, sem+`.cells[1].textContent`))
	assert.Contains(t, eval[string](t, b, sem+`.cells[2].textContent`), "export-1")
	limit = nextRead(t, b)
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", "/semaphores/dash/exports", nil, "Lock-Token", r.JSON(t)["token"].(string)).Status)
	within(t, b, limit, sem+` === null`, "the semaphore gone after its release")

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
	permit, resp := c.Hold(t, "/semaphores/dash/pool", []byte(`{"limit":2,"owner":"held-permit"}`))
	require.Nil(t, resp)
	defer permit.Close()
	require.Equal(t, "acquired", first(permit).Name)
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/semaphores/dash/pool", []byte(`{"limit":2,"ttl_ms":60000,"owner":"plain-permit"}`), apitest.JSON...).Status)

	// The plain lock, under the 5 s mark, only once the browser is up (a
	// loaded machine took longer than its 4 s to start one) and before the
	// page loads, so that the page's first listing has it: a later one
	// comes on the page's schedule, up to 5 s after a slow listing, and
	// the lock was gone before the page could show it low.
	b := newBrowser(t)
	b.do(t, chromedp.Navigate("about:blank"))
	require.Equal(t, http.StatusCreated, c.Do(t, "PUT", "/locks/dash/plain", []byte(`{"ttl_ms":4000,"owner":"cron"}`), apitest.JSON...).Status)
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

// TestDashboardForcedRelease: a page whose API key administers jobs/
// ("admin_prefixes") shows a release button on each lock and permit under
// jobs/ and on nothing else; the button asks first (Cancel releases
// nothing), then sends the forced release of the fence it shows: the lock
// is gone (GET 404) and its next holder's fence is higher, a permit goes
// and its sibling stays, and a lease gone before the confirmation is
// reported as such. A page with a key that administers nothing shows no
// button at all.
func TestDashboardForcedRelease(t *testing.T) {
	const opsKey, devKey = "ops-key-5e2a91c07d", "dev-key-83b4f6a1e2"
	file := filepath.Join(t.TempDir(), "keys.json")
	users, err := json.Marshal(map[string]any{"users": []map[string]any{
		{"user": "ops", "key_sha256": sha256Hex(opsKey), "prefixes": []string{"*"}, "admin_prefixes": []string{"jobs/"}},
		{"user": "dev", "key_sha256": sha256Hex(devKey), "prefixes": []string{"*"}},
	}})
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file, users, 0o600))
	g := apitest.Start(t, map[string]string{"LOCKGW_API_KEYS_FILE": file, "LOCKGW_UI": "true"})
	c := apitest.NewClient(g.URL)
	dev := []string{"Authorization", "Bearer " + devKey}
	put := func(path, body string) map[string]any {
		t.Helper()
		r := c.Do(t, "PUT", path, []byte(body), append(apitest.JSON, dev...)...)
		require.Equal(t, http.StatusCreated, r.Status, "%s", r.Body)
		return r.JSON(t)
	}
	fence := func(m map[string]any) int64 { return int64(m["fence"].(float64)) }
	crashed := put("/locks/jobs/nightly", `{"ttl_ms":3600000,"owner":"crashed-7"}`)
	put("/locks/other/backup", `{"ttl_ms":3600000,"owner":"backup"}`)
	p1 := put("/semaphores/jobs/pool", `{"limit":2,"ttl_ms":3600000,"owner":"p-one"}`)
	p2 := put("/semaphores/jobs/pool", `{"limit":2,"ttl_ms":3600000,"owner":"p-two"}`)

	b := newBrowser(t)
	b.do(t, chromedp.Navigate(g.URL+"/ui/"))
	within(t, b, 3*time.Second, `document.getElementById('message').textContent.includes('needs an API key')`, "that it needs a key")
	b.do(t, chromedp.SendKeys("#apikey", opsKey), chromedp.Click(`#key-form button`))
	sem := fmt.Sprintf(`document.querySelector('#semaphores tr[data-key=%q]')`, "jobs/pool")
	within(t, b, 3*time.Second, `document.body.dataset.access === 'known' && `+row("jobs/nightly")+`?.querySelector('button.force') != null && `+
		sem+`?.querySelectorAll('button.force').length === 2 && `+row("other/backup")+` !== null`, "release buttons with the admin key")

	// A real button, named for its key and fence, on administered keys only.
	button := row("jobs/nightly") + `.querySelector('button.force')`
	assert.Equal(t, "BUTTON/button", eval[string](t, b, button+`.tagName + '/' + `+button+`.type`))
	assert.Equal(t, fmt.Sprintf("Release the lock jobs/nightly (fence %d) by force", fence(crashed)), eval[string](t, b, button+`.getAttribute('aria-label')`))
	assert.False(t, eval[bool](t, b, row("other/backup")+`.querySelector('button') !== null`), "no button on a key ops does not administer")
	assert.False(t, eval[bool](t, b, `document.querySelector('#locks th.force').hidden`), "the column has a header")

	// The table is redrawn on every read; a focused button keeps the focus.
	eval[any](t, b, button+`.focus(), 0`)
	time.Sleep(1200 * time.Millisecond) // past two reads at the least
	assert.True(t, eval[bool](t, b, `document.activeElement === `+button), "the focus survives the redraws")

	// Cancel releases nothing.
	dialogOpen := `document.getElementById('force-dialog').open`
	b.click(t, `#locks tr[data-key="jobs/nightly"] button.force`)
	within(t, b, time.Second, dialogOpen, "the confirmation")
	text := eval[string](t, b, `document.getElementById('force-text').textContent`)
	assert.Contains(t, text, "jobs/nightly")
	assert.Contains(t, text, fmt.Sprint(fence(crashed)))
	assert.Contains(t, text, "crashed-7")
	assert.True(t, eval[bool](t, b, `document.getElementById('follow').hidden`), "the button's click does not follow the lock")
	b.click(t, `#force-cancel`)
	within(t, b, time.Second, `!`+dialogOpen, "the confirmation closed")
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, http.StatusOK, c.Do(t, "GET", "/locks/jobs/nightly", nil, dev...).Status, "Cancel released nothing")

	// Release: the lock is gone, its next holder's fence is higher.
	b.click(t, `#locks tr[data-key="jobs/nightly"] button.force`)
	within(t, b, time.Second, dialogOpen, "the confirmation")
	b.click(t, `#force-confirm`)
	result := `document.getElementById('force-result').textContent`
	within(t, b, 2*time.Second, result+`.includes('Released the lock jobs/nightly')`, "the release's outcome")
	assert.Equal(t, http.StatusNotFound, c.Do(t, "GET", "/locks/jobs/nightly", nil, dev...).Status, "released")
	within(t, b, 2*time.Second, row("jobs/nightly")+` === null`, "the released lock gone from the list")
	next := put("/locks/jobs/nightly", `{"ttl_ms":60000,"owner":"worker-9"}`)
	assert.Greater(t, fence(next), fence(crashed), "the next holder's fence is higher")
	assert.Contains(t, g.Logs.String(), `"forced release"`)

	// A permit: the one of the fence clicked goes, the other stays.
	permit := fmt.Sprintf(`#semaphores tr[data-key="jobs/pool"] button.force[data-fence="%d"]`, fence(p1))
	b.click(t, permit)
	within(t, b, time.Second, dialogOpen, "the permit's confirmation")
	b.click(t, `#force-confirm`)
	within(t, b, 2*time.Second, result+`.includes('Released the permit jobs/pool (fence `+fmt.Sprint(fence(p1))+`)')`, "the permit's outcome")
	r := c.Do(t, "GET", "/semaphores/jobs/pool", nil, dev...)
	require.Equal(t, http.StatusOK, r.Status)
	holders := r.JSON(t)["holders"].([]any)
	require.Len(t, holders, 1)
	assert.Equal(t, float64(fence(p2)), holders[0].(map[string]any)["fence"], "the other permit stays")

	// A lease gone between the click and the confirmation: nothing released, and said so.
	within(t, b, 2*time.Second, row("jobs/nightly")+`?.querySelector('button.force') != null`, "the new holder's button")
	b.click(t, `#locks tr[data-key="jobs/nightly"] button.force`)
	within(t, b, time.Second, dialogOpen, "the confirmation")
	require.Equal(t, http.StatusNoContent, c.Do(t, "DELETE", "/locks/jobs/nightly", nil, append(dev, "Lock-Token", next["token"].(string))...).Status)
	b.click(t, `#force-confirm`)
	within(t, b, 2*time.Second, result+`.includes('Already gone')`, "that it was already gone")
	assert.Contains(t, eval[string](t, b, result), "nothing was released", "the problem's detail")

	// The 401s before the key came and the 404 of the lease already gone
	// are the browser's network log; nothing else may be an error.
	for _, e := range b.errors() {
		assert.True(t, strings.Contains(e, "401") || strings.Contains(e, "404"), "console error: %s", e)
	}

	// A key that administers nothing: no button, no column, on a fresh page.
	put("/locks/jobs/weekly", `{"ttl_ms":60000,"owner":"w"}`)
	b.do(t, chromedp.Navigate(g.URL+"/ui/"))
	within(t, b, 3*time.Second, `document.getElementById('message').textContent.includes('needs an API key')`, "that it needs a key")
	b.do(t, chromedp.SendKeys("#apikey", devKey), chromedp.Click(`#key-form button`))
	within(t, b, 3*time.Second, `document.body.dataset.access === 'known' && `+row("jobs/weekly")+` !== null && `+sem+` !== null`, "the listing with dev's key")
	time.Sleep(time.Second) // a few more reads
	assert.Zero(t, eval[float64](t, b, `document.querySelectorAll('button.force').length`), "no release button without the role")
	assert.True(t, eval[bool](t, b, `document.querySelector('#locks th.force').hidden`))
	assert.Equal(t, 5, int(eval[float64](t, b, row("jobs/weekly")+`.cells.length`)))
}
