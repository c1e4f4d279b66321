package server_test

// Security checks against a real gateway (apitest.Start runs server.Run):
// a slow-header client is cut off; lock tokens and API keys never reach a
// log, a URL, a read, or (on the Redis backends) Redis itself, which holds
// only their SHA-256 digests.

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/internal/redistest"
	"github.com/lockgateway/lockgateway/lockstore"
)

// TestSlowHeaderClientIsCutOff: a client that opens a connection and sends
// its request line or headers a byte at a time, never finishing, is cut off
// by the server's ReadHeaderTimeout (5 s), without an answer, and holds up
// nobody else meanwhile.
func TestSlowHeaderClientIsCutOff(t *testing.T) {
	parallelWhenShort(t)
	const readHeaderTimeout = 5 * time.Second // server.Run's http.Server
	g := apitest.Start(t, nil)
	addr := strings.TrimPrefix(g.URL, "http://")

	for _, tc := range []struct {
		name, start string
		drip        bool
	}{
		{"silent", "", false},
		{"partial request line", "GET /heal", true},
		{"partial headers", "GET /healthz HTTP/1.1\r\nHost: gateway\r\nX-Slow: ", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn, err := net.Dial("tcp", addr)
			require.NoError(t, err)
			defer conn.Close()
			start := time.Now()
			_, err = io.WriteString(conn, tc.start)
			require.NoError(t, err)

			type result struct {
				got []byte
				err error
				at  time.Duration
			}
			closed := make(chan result, 1)
			go func() {
				got, err := io.ReadAll(conn) // returns when the server closes
				closed <- result{got, err, time.Since(start)}
			}()

			// One more byte of the never-ending line every 250 ms.
			drip := time.NewTicker(250 * time.Millisecond)
			defer drip.Stop()
			limit := time.After(readHeaderTimeout + 10*time.Second)
			sent := 0
			for {
				select {
				case <-drip.C:
					if !tc.drip {
						continue
					}
					if _, err := conn.Write([]byte("a")); err == nil {
						sent++
					}
					continue
				case <-limit:
					t.Fatalf("the connection was still open %v after it opened (%d bytes dripped)", time.Since(start), sent)
				case r := <-closed:
					t.Logf("the server closed the connection %v after it opened (%d bytes dripped; ReadHeaderTimeout %v); it sent %q",
						r.at.Round(time.Millisecond), sent, readHeaderTimeout, r.got)
					assert.True(t, r.err == nil || isReset(r.err), "read: %v", r.err)
					// At the deadline net/http either closes silently or, when
					// it holds a partial request line, parses it and answers
					// its own 400; never anything from the gateway.
					if len(r.got) > 0 {
						assert.True(t, strings.HasPrefix(string(r.got), "HTTP/1.1 400 Bad Request\r\n"), "%q", r.got)
						assert.Contains(t, string(r.got), "Connection: close")
					}
					if tc.drip {
						assert.Greater(t, sent, 3, "the server waited for the headers before cutting")
					}
					assert.Less(t, r.at, readHeaderTimeout+5*time.Second, "cut within the header timeout plus a margin")
				}
				break
			}
		})
	}
	t.Run("others are served meanwhile", func(t *testing.T) {
		t.Parallel()
		c := apitest.NewClient(g.URL)
		for range 5 {
			start := time.Now()
			require.Equal(t, http.StatusOK, c.Do(t, "GET", "/healthz", nil).Status)
			assert.Less(t, time.Since(start), time.Second)
			time.Sleep(500 * time.Millisecond)
		}
	})
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "connection reset")
}

// TestSpecKeepsTokensOutOfURLs: no path of openapi.yaml names a token, and
// every parameter that carries one (Lock-Token, If-Match) is a header.
func TestSpecKeepsTokensOutOfURLs(t *testing.T) {
	doc, _ := apitest.Spec(t)
	tokenSchema := doc.Components.Schemas["Token"]
	require.NotNil(t, tokenSchema)
	carriesToken := func(p *openapi3.Parameter) bool {
		name := strings.ToLower(p.Name)
		return strings.Contains(name, "token") || name == "if-match" || name == "authorization" ||
			p.Schema != nil && (p.Schema.Value == tokenSchema.Value || strings.HasSuffix(p.Schema.Ref, "/Token"))
	}
	checked := 0
	for path, item := range doc.Paths.Map() {
		assert.NotContains(t, strings.ToLower(path), "token", "path %s", path)
		for method, op := range item.Operations() {
			params := append(append(openapi3.Parameters{}, item.Parameters...), op.Parameters...)
			for _, ref := range params {
				p := ref.Value
				require.NotNil(t, p, "%s %s: unresolved parameter %s", method, path, ref.Ref)
				if carriesToken(p) {
					checked++
					assert.Equal(t, openapi3.ParameterInHeader, p.In, "%s %s: parameter %s carries a token, so it must be a header", method, path, p.Name)
				}
				if p.In == openapi3.ParameterInPath || p.In == openapi3.ParameterInQuery {
					assert.False(t, carriesToken(p), "%s %s: %s parameter %s", method, path, p.In, p.Name)
				}
			}
		}
	}
	assert.Positive(t, checked, "the spec has Lock-Token / If-Match parameters to check")
}

// secrets are what must never leave the client's hands except in the
// response that hands a token to its holder.
type secrets struct {
	tokens  []string // lock tokens, chosen and server-made
	apiKeys []string // valid and invalid API keys
}

func (s *secrets) all() []string { return append(append([]string{}, s.tokens...), s.apiKeys...) }

// forms are the ways a secret could show up in text: as is, escaped for a
// URL or JSON, base64 and hex encoded, or cut in half.
func forms(secret string) []string {
	b := []byte(secret)
	out := []string{
		secret,
		url.QueryEscape(secret), url.PathEscape(secret),
		base64.StdEncoding.EncodeToString(b), base64.RawStdEncoding.EncodeToString(b),
		base64.URLEncoding.EncodeToString(b), base64.RawURLEncoding.EncodeToString(b),
		hex.EncodeToString(b), strings.ToUpper(hex.EncodeToString(b)),
	}
	if j, err := json.Marshal(secret); err == nil {
		out = append(out, string(j[1:len(j)-1]))
	}
	if len(secret) >= 22 { // half a token still gives half its bits away
		out = append(out, secret[:11], secret[len(secret)-11:])
	}
	return out
}

// assertHidden fails for every form of every secret found in text.
func assertHidden(t *testing.T, what, text string, secrets []string) {
	t.Helper()
	for _, s := range secrets {
		for _, f := range forms(s) {
			if i := strings.Index(text, f); i >= 0 {
				lo, hi := max(0, i-120), min(len(text), i+len(f)+120)
				t.Errorf("%s holds %q (a form of secret %q): …%s…", what, f, s, text[lo:hi])
			}
		}
	}
}

func digestHex(token string) string {
	d := sha256.Sum256([]byte(token))
	return hex.EncodeToString(d[:])
}

// randomToken is a token no test text could hold by chance.
func randomToken(prefix string) string { return prefix + lockstore.NewToken() }

// exchange is one request and its (spec-checked) response.
type exchange struct {
	method, path string
	resp         *apitest.Response
}

// workload drives every lock operation, success and failure, through API
// keys, and leaves three locks held (held) for the Redis checks.
type workload struct {
	t         *testing.T
	c         *apitest.Client
	bearer    string
	prefix    string
	mu        sync.Mutex
	exchanges []exchange
	secrets   secrets
	held      map[string]string // lock key → token holding it at the end
}

func (w *workload) do(method, key string, body []byte, headers ...string) *apitest.Response {
	w.t.Helper()
	path := key
	if !strings.HasPrefix(key, "/") {
		path = lockPath(key)
	}
	r := w.c.Do(w.t, method, path, body, headers...)
	w.mu.Lock()
	w.exchanges = append(w.exchanges, exchange{method, path, r})
	w.mu.Unlock()
	return r
}

func (w *workload) token(prefix string) string {
	tok := randomToken(prefix)
	w.secrets.tokens = append(w.secrets.tokens, tok)
	return tok
}

func (w *workload) run() {
	t := w.t
	auth := []string{"Authorization", "Bearer " + w.bearer}
	with := func(h ...string) []string { return append(append([]string{}, auth...), h...) }
	expect := func(want int, r *apitest.Response) {
		t.Helper()
		require.Equal(t, want, r.Status, "%s", r.Body)
	}
	k1, k2, k3, k4 := w.prefix+"/one", w.prefix+"/two", w.prefix+"/three", w.prefix+"/four"
	t1, t2 := w.token("t1-"), w.token("t2-")
	jsonAuth := with(apitest.JSON...)

	// A chosen token: acquire, retry, conflict, extend both ways, the
	// failures (412, 428, a malformed token), release, release again.
	expect(201, w.do("PUT", k1, []byte(`{"ttl_ms":60000,"owner":"security-test"}`), append(jsonAuth, "Lock-Token", t1)...))
	expect(200, w.do("PUT", k1, nil, with("Lock-Token", t1)...))
	expect(409, w.do("PUT", k1, nil, with("Lock-Token", t2)...))
	expect(200, w.do("PATCH", k1, []byte(`{"ttl_ms":60000}`), append(jsonAuth, "Lock-Token", t1)...))
	expect(200, w.do("PATCH", k1, nil, with("If-Match", `"`+t1+`"`)...))
	expect(200, w.do("GET", k1, nil, auth...))
	expect(412, w.do("PATCH", k1, nil, with("Lock-Token", t2)...))
	expect(412, w.do("DELETE", k1, nil, with("If-Match", `"`+t2+`"`)...))
	expect(428, w.do("DELETE", k1, nil, auth...))
	bad := w.token("bad!") // not a valid token: a 400 that must not echo it
	expect(400, w.do("DELETE", k1, nil, with("Lock-Token", bad)...))
	expect(400, w.do("PATCH", k1, nil, with("Lock-Token", t1, "If-Match", `"`+t2+`"`)...))
	expect(204, w.do("DELETE", k1, nil, with("If-Match", `"`+t1+`"`)...))
	expect(404, w.do("DELETE", k1, nil, with("Lock-Token", t1)...))
	expect(404, w.do("PATCH", k1, nil, with("Lock-Token", t1)...))
	expect(404, w.do("GET", k1, nil, auth...))

	// A server-made token, still held at the end.
	r := w.do("PUT", k2, []byte(`{"ttl_ms":60000}`), jsonAuth...)
	expect(201, r)
	made, _ := r.JSON(t)["token"].(string)
	require.NotEmpty(t, made)
	w.secrets.tokens = append(w.secrets.tokens, made)
	expect(200, w.do("GET", k2, nil, auth...))

	// A waiter handed the lock by a release, still held at the end.
	t3, t4 := w.token("t3-"), w.token("t4-")
	expect(201, w.do("PUT", k3, []byte(`{"ttl_ms":60000}`), append(jsonAuth, "Lock-Token", t3)...))
	waited := make(chan *apitest.Response, 1)
	go func() {
		waited <- w.do("PUT", k3, []byte(`{"ttl_ms":60000,"wait_ms":10000}`), append(jsonAuth, "Lock-Token", t4)...)
	}()
	time.Sleep(300 * time.Millisecond)
	expect(204, w.do("DELETE", k3, nil, with("Lock-Token", t3)...))
	expect(201, <-waited)

	// Prefer: wait that runs out.
	expect(409, w.do("PUT", k3, nil, with("Lock-Token", t1, "Prefer", "wait=1")...))

	// A fourth lock, held by a chosen token.
	t5 := w.token("t5-")
	expect(201, w.do("PUT", k4, nil, with("Lock-Token", t5)...))

	// API keys: missing, wrong, another user's key outside its prefixes.
	expect(401, w.do("PUT", k1, nil, "Lock-Token", t1))
	for _, k := range w.secrets.apiKeys {
		if k == w.bearer {
			continue
		}
		r := w.do("PUT", k1, nil, "Authorization", "Bearer "+k, "Lock-Token", t1)
		require.Contains(t, []int{401, 403}, r.Status, "%s", r.Body)
	}
	expect(401, w.do("PUT", k1, nil, "Authorization", "Basic "+base64.StdEncoding.EncodeToString([]byte("user:"+w.bearer))))

	// The other endpoints.
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		expect(200, w.do("GET", p, nil))
	}

	w.held = map[string]string{k2: made, k3: t4, k4: t5}
}

// checkResponses: Location headers and every read carry no secret, and no
// response but the grant or extension a holder receives carries its token.
func (w *workload) checkResponses(t *testing.T) {
	sawLocation := false
	for _, x := range w.exchanges {
		what := fmt.Sprintf("%s %s → %d", x.method, x.path, x.resp.Status)
		loc := x.resp.Header.Get("Location")
		if loc != "" {
			sawLocation = true
			assert.True(t, strings.HasPrefix(loc, "/locks/"+w.prefix), "%s: Location %q", what, loc)
			assertHidden(t, what+": Location", loc, w.secrets.all())
		}
		text := headerText(x.resp.Header) + "\n" + string(x.resp.Body)
		if x.method == "GET" {
			assertHidden(t, what, text, w.secrets.all())
			continue
		}
		var own string // the one token this response may carry
		if x.resp.Status == 200 || x.resp.Status == 201 {
			own, _ = x.resp.JSON(t)["token"].(string)
			assert.Equal(t, `"`+own+`"`, x.resp.Header.Get("ETag"), what)
		}
		var others []string
		for _, s := range w.secrets.all() {
			if s != own {
				others = append(others, s)
			}
		}
		assertHidden(t, what, text, others)
	}
	assert.True(t, sawLocation, "the workload saw Location headers")
}

func headerText(h http.Header) string {
	var b strings.Builder
	for name, vs := range h {
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(vs, ", "))
	}
	return b.String()
}

// apiKeyEnv writes a keys file for a user with the key bearer and a user
// limited to a prefix the workload never uses, and returns the gateway
// environment with debug logs and a shadow rate limit (it logs what it
// would refuse, keyed by the authenticated user).
func apiKeyEnv(t *testing.T, bearer, scoped string) map[string]string {
	keys := fmt.Sprintf(`{"users":[
		{"user":"security-test","key_sha256":%q,"prefixes":["*"]},
		{"user":"scoped","key_sha256":%q,"prefixes":["elsewhere/"]}]}`, digestHex(bearer), digestHex(scoped))
	path := filepath.Join(t.TempDir(), "api-keys.json")
	require.NoError(t, os.WriteFile(path, []byte(keys), 0o600))
	return map[string]string{
		"LOCKGW_LOG_LEVEL":         "debug",
		"LOCKGW_API_KEYS_FILE":     path,
		"LOCKGW_RATE_LIMIT_WINDOW": "1s",
		"LOCKGW_RATE_LIMIT_SHADOW": "true",
	}
}

// monitor records every command a redis-server receives (MONITOR), from
// now until stop is called.
type monitor struct {
	conn net.Conn
	done chan struct{}
	mu   sync.Mutex
	buf  strings.Builder
}

func startMonitor(t *testing.T, addr string) *monitor {
	conn, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	rd := bufio.NewReader(conn)
	_, err = io.WriteString(conn, "MONITOR\r\n")
	require.NoError(t, err)
	ok, err := rd.ReadString('\n')
	require.NoError(t, err)
	require.Equal(t, "+OK\r\n", ok)
	m := &monitor{conn: conn, done: make(chan struct{})}
	go func() {
		defer close(m.done)
		for {
			line, err := rd.ReadString('\n')
			m.mu.Lock()
			m.buf.WriteString(line)
			m.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { m.stop() })
	return m
}

// stop ends the recording and returns it.
func (m *monitor) stop() string {
	time.Sleep(100 * time.Millisecond) // let the last commands arrive
	_ = m.conn.Close()
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf.String()
}

// dumpRedis reads every key of a Redis node, by type, into one text of
// "key (type): value" lines, and returns the lock values by lock key.
func dumpRedis(t *testing.T, c *redis.Client) (string, map[string]string) {
	ctx := context.Background()
	var b strings.Builder
	locks := map[string]string{}
	iter := c.Scan(ctx, 0, "*", 100).Iterator()
	for iter.Next(ctx) {
		key := iter.Val()
		typ, err := c.Type(ctx, key).Result()
		require.NoError(t, err)
		var val any
		switch typ {
		case "string":
			s, err := c.Get(ctx, key).Result()
			if errors.Is(err, redis.Nil) {
				continue // expired between SCAN and GET
			}
			require.NoError(t, err)
			val = s
			if strings.HasSuffix(key, ":lock") {
				locks[key] = s
			}
		case "zset":
			val, err = c.ZRangeWithScores(ctx, key, 0, -1).Result()
		case "hash":
			val, err = c.HGetAll(ctx, key).Result()
		case "list":
			val, err = c.LRange(ctx, key, 0, -1).Result()
		case "set":
			val, err = c.SMembers(ctx, key).Result()
		case "stream":
			val, err = c.XRange(ctx, key, "-", "+").Result()
		case "none":
			continue
		default:
			t.Fatalf("key %s has type %s, which the dump cannot read", key, typ)
		}
		require.NoError(t, err)
		fmt.Fprintf(&b, "%s (%s): %v\n", key, typ, val)
	}
	require.NoError(t, iter.Err())
	return b.String(), locks
}

// checkRedis: no token or key in any key name or value of a node, nor in
// any command it received; every lock value starts with the SHA-256 of the
// token holding it. It returns the held keys whose lock the node has.
func checkRedis(t *testing.T, w *workload, node *redistest.Server, commands string) []string {
	dump, locks := dumpRedis(t, node.Client())
	t.Logf("%s: %d keys, %d bytes dumped, %d bytes of MONITOR", node.Addr(), strings.Count(dump, "\n"), len(dump), len(commands))
	assertHidden(t, "redis "+node.Addr()+" data", dump, w.secrets.all())
	assertHidden(t, "redis "+node.Addr()+" MONITOR", commands, w.secrets.all())
	var has []string
	for key, tok := range w.held {
		lockKey := "lockgw:{" + key + "}:lock"
		value, ok := locks[lockKey]
		if !ok {
			continue
		}
		has = append(has, key)
		digest, _, _ := strings.Cut(value, ":")
		assert.Equal(t, digestHex(tok), digest, "%s = %q: the value starts with the token's SHA-256", lockKey, value)
		assert.Contains(t, commands, digestHex(tok), "MONITOR saw the digest the gateway sent")
	}
	return has
}

// TestSecretsStayHidden runs the workload on each backend with debug logs,
// API keys and a shadow rate limit, then checks responses, Redis (data and
// every command it received) and the gateway's whole log, go-redis's lines
// included, for any form of a token or an API key. The backends run one
// after another, never in parallel: go-redis has one logger per process,
// and it must be this gateway's.
func TestSecretsStayHidden(t *testing.T) {
	for _, backend := range []string{"memory", "redis", "redlock"} {
		t.Run(backend, func(t *testing.T) {
			bearer, scoped := randomToken("lgw+key/"), randomToken("lgw+scoped/")
			wrong := randomToken("lgw+wrong=")
			env := apiKeyEnv(t, bearer, scoped)
			var nodes []*redistest.Server
			switch backend {
			case "redis":
				nodes = []*redistest.Server{redistest.Start(t)}
				env["LOCKGW_BACKEND"], env["LOCKGW_REDIS_URL"] = "redis", nodes[0].URL()
			case "redlock":
				var rl map[string]string
				nodes, rl = redlockEnv(t, 3)
				for k, v := range rl {
					env[k] = v
				}
			}
			var monitors []*monitor
			for _, n := range nodes {
				monitors = append(monitors, startMonitor(t, n.Addr()))
			}
			g := apitest.Start(t, env)
			w := &workload{
				t: t, c: apitest.NewClient(g.URL), bearer: bearer, prefix: "sec/" + backend,
				secrets: secrets{apiKeys: []string{bearer, scoped, wrong}},
			}
			// A Redlock gateway's first requests, before its warm-up, may
			// meet cold connections; a load balancer waits for /readyz.
			waitReady(t, w.c)
			w.run()

			// Redis holds each held lock (Redlock: on a majority of nodes)
			// under its token's digest, and never a token.
			holders := map[string]int{}
			for i, n := range nodes {
				commands := monitors[i].stop()
				t.Run("redis "+n.Addr(), func(t *testing.T) {
					for _, key := range checkRedis(t, w, n, commands) {
						holders[key]++
					}
				})
			}
			for key := range w.held {
				if len(nodes) > 0 {
					assert.GreaterOrEqual(t, holders[key], len(nodes)/2+1, "nodes holding %s", key)
				}
			}

			// A backend that dies makes go-redis and the readiness check
			// log; those lines must be as clean as the rest.
			for _, n := range nodes {
				n.Kill()
			}
			if len(nodes) > 0 {
				assert.Equal(t, http.StatusServiceUnavailable, w.do("PUT", w.prefix+"/five", nil, "Authorization", "Bearer "+bearer, "Lock-Token", w.token("t6-")).Status)
				assert.Equal(t, http.StatusServiceUnavailable, w.do("GET", "/readyz", nil).Status)
			}
			t.Run("responses", w.checkResponses)
			require.NoError(t, g.Stop())

			t.Run("logs", func(t *testing.T) {
				logs := g.Logs.String()
				lines := strings.Count(logs, "\n")
				t.Logf("%d log lines (%d access lines, %d from go-redis, %d from net/http, %d at warn or error), %d bytes",
					lines, strings.Count(logs, `"message":"request"`), strings.Count(logs, `"source":"go-redis"`),
					strings.Count(logs, `"source":"net/http"`),
					strings.Count(logs, `"level":"warn"`)+strings.Count(logs, `"level":"error"`), len(logs))
				assert.GreaterOrEqual(t, strings.Count(logs, `"message":"request"`), len(w.exchanges), "one access line per request")
				assert.Contains(t, logs, "rate limit would refuse", "the shadow limiter logged")
				assertHidden(t, "the gateway's log", logs, w.secrets.all())
			})
		})
	}
}
