// Package apitest runs the gateway in-process for tests and checks every
// response it gives against openapi.yaml, so the code and the contract
// cannot drift apart.
package apitest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway"
	"github.com/lockgateway/lockgateway/server"
)

var (
	specOnce sync.Once
	spec     *openapi3.T
	router   routers.Router
	specErr  error
)

// Spec returns openapi.yaml, loaded and validated once.
func Spec(t testing.TB) (*openapi3.T, routers.Router) {
	t.Helper()
	specOnce.Do(func() {
		// A stream's body is text; Stream checks its events itself.
		openapi3filter.RegisterBodyDecoder("text/event-stream", openapi3filter.PlainBodyDecoder)
		// The dashboard's files are text the validator only needs to
		// read as a string.
		for _, ct := range []string{"text/html", "text/css", "text/javascript"} {
			openapi3filter.RegisterBodyDecoder(ct, openapi3filter.FileBodyDecoder)
		}
		doc, err := openapi3.NewLoader().LoadFromData(lockgateway.OpenAPI)
		if err != nil {
			specErr = fmt.Errorf("load openapi.yaml: %w", err)
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			specErr = fmt.Errorf("openapi.yaml is invalid: %w", err)
			return
		}
		doc.Servers = nil // match any host: the tests' ports are random
		r, err := gorillamux.NewRouter(doc)
		if err != nil {
			specErr = fmt.Errorf("route openapi.yaml: %w", err)
			return
		}
		spec, router = doc, r
	})
	require.NoError(t, specErr)
	return spec, router
}

// Gateway is a gateway started by a test through server.Run.
type Gateway struct {
	URL  string // http://127.0.0.1:port
	Logs *SyncBuffer
	stop context.CancelFunc
	done chan error
}

// Start runs server.Run with env (LOCKGW_* names) on a free loopback port,
// waits until /healthz answers, and stops it when the test ends, requiring
// a clean exit.
func Start(t testing.TB, env map[string]string) *Gateway {
	t.Helper()
	return StartWith(t, env, server.Run)
}

// RunFunc is server.Run's signature.
type RunFunc func(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error

// StartWith is Start with run in place of server.Run: for a test that
// gives the gateway something its configuration cannot (a tracer provider
// of the test's).
func StartWith(t testing.TB, env map[string]string, run RunFunc) *Gateway {
	t.Helper()
	// A port found free can be taken by a parallel test before Run binds
	// it; then try another.
	for range 5 {
		if g := start(t, env, run); g != nil {
			t.Cleanup(func() { require.NoError(t, g.Stop(), "gateway exit") })
			return g
		}
	}
	t.Fatal("apitest: no free port for the gateway after 5 tries")
	return nil
}

func start(t testing.TB, env map[string]string, run RunFunc) *Gateway {
	t.Helper()
	addr := freeAddr(t)
	ctx, stop := context.WithCancel(context.Background())
	g := &Gateway{URL: "http://" + addr, Logs: &SyncBuffer{}, stop: stop, done: make(chan error, 1)}
	getenv := func(k string) string {
		if k == "LOCKGW_ADDR" {
			return addr
		}
		return env[k]
	}
	go func() { g.done <- run(ctx, nil, getenv, g.Logs, g.Logs) }()

	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(g.URL + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return g
			}
		}
		select {
		case err := <-g.done:
			stop()
			if err != nil && strings.Contains(err.Error(), "address already in use") {
				return nil
			}
			t.Fatalf("gateway exited before serving: %v\nlogs:\n%s", err, g.Logs)
		default:
		}
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("gateway did not answer /healthz in 10s\nlogs:\n%s", g.Logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Stop stops the gateway as SIGTERM would and returns what Run returned.
// Safe to call more than once.
func (g *Gateway) Stop() error {
	g.stop()
	err, ok := <-g.done
	if ok {
		close(g.done)
	}
	return err
}

// Response is a response already checked against openapi.yaml.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into a map.
func (r *Response) JSON(t testing.TB) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(r.Body, &m), "body: %s", r.Body)
	return m
}

// Problem decodes a problem body, checks the fields every problem has, and
// returns it.
func (r *Response) Problem(t testing.TB) map[string]any {
	t.Helper()
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "body: %s", r.Body)
	p := r.JSON(t)
	require.Equal(t, float64(r.Status), p["status"], "status in the body")
	require.NotEmpty(t, p["title"])
	require.NotEmpty(t, p["detail"])
	require.Equal(t, r.Header.Get("X-Request-Id"), p["request_id"])
	return p
}

// ProblemType is the problem's type slug ("lock-held").
func (r *Response) ProblemType(t testing.TB) string {
	t.Helper()
	typ, _ := r.Problem(t)["type"].(string)
	slug, ok := strings.CutPrefix(typ, "https://lockgateway.dev/problems/")
	require.True(t, ok, "problem type %q", typ)
	return slug
}

// Client sends requests to a gateway and checks each response against
// openapi.yaml.
type Client struct {
	Base string
	HTTP *http.Client
}

// NewClient returns a client for base with a 30 s request timeout.
func NewClient(base string) *Client {
	return &Client{Base: base, HTTP: &http.Client{Timeout: 30 * time.Second}}
}

// JSON is the Content-Type header pair for a JSON body.
var JSON = []string{"Content-Type", "application/json"}

// Do sends a request. body, when not nil, is sent as is; headers are
// "Name", "value" pairs (see JSON). The response must match the spec.
func (c *Client) Do(t testing.TB, method, path string, body []byte, headers ...string) *Response {
	t.Helper()
	resp, err := c.Try(t, method, path, body, headers...)
	require.NoError(t, err)
	return resp
}

// Try is Do for callers that expect transport errors (a gateway going
// away); a response that arrives must still match the spec.
func (c *Client) Try(t testing.TB, method, path string, body []byte, headers ...string) (*Response, error) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequest(method, c.Base+path, rd)
	require.NoError(t, err)
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Add(headers[i], headers[i+1])
	}
	hresp, err := c.HTTP.Do(req)
	if err != nil {
		return nil, err
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(hresp.Body)
	if err != nil {
		return nil, err
	}
	resp := &Response{Status: hresp.StatusCode, Header: hresp.Header, Body: b}
	CheckResponse(t, req, resp)
	return resp, nil
}

// CheckResponse fails the test unless resp matches what openapi.yaml says
// of req: documented status, headers and body schema. Unknown paths have no
// operation, so their body is checked against the Problem schema.
func CheckResponse(t testing.TB, req *http.Request, resp *Response) {
	t.Helper()
	doc, r := Spec(t)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "every response carries X-Request-Id")

	// OpenAPI path parameters cannot hold "/", so look the route up with a
	// one-segment key; the key's own rules are tested elsewhere.
	routeReq := req.Clone(context.Background())
	for _, prefix := range []string{"/locks/", "/semaphores/"} {
		if strings.HasPrefix(req.URL.EscapedPath(), prefix) {
			routeReq.URL = &url.URL{Scheme: req.URL.Scheme, Host: req.URL.Host, Path: prefix + "k"}
		}
	}
	route, params, err := r.FindRoute(routeReq)
	if err != nil {
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.Status,
			"%s %s has no operation in openapi.yaml but answered %d", req.Method, req.URL.Path, resp.Status)
		checkProblemSchema(t, doc, resp)
		return
	}
	opts := &openapi3filter.Options{IncludeResponseStatus: true, MultiError: true}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: routeReq, PathParams: params, Route: route, Options: opts,
		},
		Status:  resp.Status,
		Header:  resp.Header,
		Options: opts,
	}
	in.SetBodyBytes(resp.Body)
	require.NoError(t, openapi3filter.ValidateResponse(context.Background(), in),
		"%s %s → %d does not match openapi.yaml; body: %s", req.Method, req.URL.Path, resp.Status, resp.Body)
}

// CheckProblem fails the test unless resp is a problem valid against
// openapi.yaml's Problem schema: for responses to requests no router can
// match, such as ones net/http could not parse.
func CheckProblem(t testing.TB, resp *Response) {
	t.Helper()
	doc, _ := Spec(t)
	checkProblemSchema(t, doc, resp)
}

func checkProblemSchema(t testing.TB, doc *openapi3.T, resp *Response) {
	t.Helper()
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	ref := doc.Components.Schemas["Problem"]
	require.NotNil(t, ref, "openapi.yaml has a Problem schema")
	var v any
	require.NoError(t, json.Unmarshal(resp.Body, &v))
	require.NoError(t, ref.Value.VisitJSON(v), "problem body: %s", resp.Body)
}

var slug = regexp.MustCompile(`[^A-Za-z0-9]+`)

// Key returns a lock key unique to the test.
func Key(t testing.TB) string {
	return "test/" + strings.Trim(slug.ReplaceAllString(t.Name(), "-"), "-") + fmt.Sprintf("/%d", time.Now().UnixNano())
}

// SyncBuffer is a bytes.Buffer safe for a logger and a test to share.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}
