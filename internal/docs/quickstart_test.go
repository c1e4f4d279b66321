package docs

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/internal/apitest"
	"github.com/lockgateway/lockgateway/server"
)

// TestQuickStartOutput runs the README's Quick start as a reader would: each
// ```console block of the section, in order, against one gateway (memory
// backend, the defaults but the address), each `$ curl …` line through bash
// with the gateway's address put for localhost:8080, and compares what curl
// prints with the lines the README shows under it, byte for byte, but for
// the values that must differ from run to run (see placeholders), and the
// Date headers, which the README says it leaves out. So a renamed header or
// field, a field added or dropped, a changed status or message fails it.
//
// A `$ NAME=VALUE` line sets a shell variable; a VALUE that is a token the
// README showed in an earlier output becomes the token the gateway really
// gave there. A block with a stream ended by Ctrl-C (`^C`) is not run: its
// output is timed by the reader's hand.
func TestQuickStartOutput(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not installed; the README's commands are curl commands")
	}
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	require.NoError(t, err)
	blocks := quickStartBlocks(string(readme))
	require.NotEmpty(t, blocks, "README.md's Quick start has no ```console block")

	addr := startGateway(t)
	env := map[string]string{}
	tokens := map[string]string{} // a token the README shows → the one the gateway gave
	ran := 0
	for _, b := range blocks {
		if strings.Contains(b.text, "\n^C\n") {
			continue
		}
		for _, c := range commands(b.text) {
			if m := assignment.FindStringSubmatch(c.line); m != nil {
				v, ok := tokens[m[2]]
				if !ok {
					v = m[2]
				}
				env[m[1]] = v
				continue
			}
			got := runCurl(t, c.line, addr, env)
			learnTokens(tokens, c.want, got)
			want, gotN := normalize(c.want, c.line), normalize(got, c.line)
			assert.Equal(t, want, gotN, "README.md line %d: %s\n(placeholders for tokens, fences, times and request ids; the README shows what the gateway sends)", b.line+c.offset, c.line)
			ran++
		}
	}
	require.GreaterOrEqual(t, ran, 5, "the Quick start's curl commands were not found")
}

type block struct {
	line int // README line of the block's first line of text
	text string
}

type command struct {
	offset int    // lines after the block's first
	line   string // after "$ "
	want   string // the lines shown under it
}

// quickStartBlocks returns the ```console blocks between "## Quick start"
// and the next "## " heading.
func quickStartBlocks(readme string) []block {
	var out []block
	in, code := false, false
	var cur []string
	start := 0
	for i, l := range strings.Split(readme, "\n") {
		switch {
		case !code && strings.HasPrefix(l, "## "):
			in = l == "## Quick start"
		case in && !code && l == "```console":
			code, cur, start = true, nil, i+2
		case code && l == "```":
			code = false
			out = append(out, block{line: start, text: strings.Join(cur, "\n") + "\n"})
		case code:
			cur = append(cur, l)
		}
	}
	return out
}

func commands(text string) []command {
	var out []command
	for i, l := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
		if rest, ok := strings.CutPrefix(l, "$ "); ok {
			out = append(out, command{offset: i, line: rest})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].want += l + "\n"
		}
	}
	return out
}

var assignment = regexp.MustCompile(`^([A-Z_]+)=(\S+)$`)

func runCurl(t *testing.T, line, addr string, env map[string]string) string {
	t.Helper()
	require.True(t, strings.HasPrefix(line, "curl "), "only curl commands and VAR=value are run: %s", line)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", strings.ReplaceAll(line, "localhost:8080", addr))
	cmd.Env = os.Environ()
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s: %s", line, stderr.String())
	// curl -i prints HTTP's CRLFs; the README shows lines.
	s := strings.ReplaceAll(string(out), "\r\n", "\n")
	var kept []string
	for _, l := range strings.Split(s, "\n") {
		if !strings.HasPrefix(l, "Date: ") {
			kept = append(kept, l)
		}
	}
	return strings.Join(kept, "\n")
}

var tokenField = regexp.MustCompile(`"token":"([^"]+)"`)

// learnTokens pairs the tokens the README shows with those the gateway gave,
// in order.
func learnTokens(tokens map[string]string, want, got string) {
	w, g := tokenField.FindAllStringSubmatch(want, -1), tokenField.FindAllStringSubmatch(got, -1)
	for i := range min(len(w), len(g)) {
		tokens[w[i][1]] = g[i][1]
	}
}

// placeholders: what differs from run to run, on both sides. A token the
// gateway made is 22 characters of base64url (one the README chooses itself,
// as in Safe retries, is longer and compared as it is).
var placeholders = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`"token":"[A-Za-z0-9_-]{22}"`), `"token":"<token>"`},
	{regexp.MustCompile(`(?m)^Etag: "[A-Za-z0-9_-]{22}"$`), `Etag: "<token>"`},
	{regexp.MustCompile(`"fence":\d+`), `"fence":<fence>`},
	{regexp.MustCompile(`W/"fence-\d+"`), `W/"fence-<fence>"`},
	{regexp.MustCompile(`"expires_at":"[^"]+"`), `"expires_at":"<time>"`},
	{regexp.MustCompile(`(?m)^X-Request-Id: \S+$`), `X-Request-Id: <request id>`},
	{regexp.MustCompile(`"request_id":"[^"]+"`), `"request_id":"<request id>"`},
}

// timeLeft: a GET's ttl_ms is the time left, which depends on when it runs.
var timeLeft = regexp.MustCompile(`"ttl_ms":\d+`)

func normalize(s, line string) string {
	s = strings.TrimRight(s, "\n")
	for _, p := range placeholders {
		s = p.re.ReplaceAllString(s, p.with)
	}
	if !strings.Contains(line, " -X ") {
		s = timeLeft.ReplaceAllString(s, `"ttl_ms":<time left>`)
	}
	return s
}

// startGateway runs a gateway on the memory backend on a free loopback port
// and returns its host:port once /healthz answers.
func startGateway(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	logs := &apitest.SyncBuffer{}
	vars := map[string]string{"LOCKGW_ADDR": "127.0.0.1:0", "LOCKGW_BACKEND": "memory", "LOCKGW_LOG_FORMAT": "json"}
	done := make(chan error, 1)
	go func() { done <- server.Run(ctx, nil, func(k string) string { return vars[k] }, logs, logs) }()
	t.Cleanup(func() { cancel(); <-done })
	listening := regexp.MustCompile(`"addr":"([^"]+)"[^\n]*"lockgateway listening"`)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		select {
		case err := <-done:
			t.Fatalf("the gateway exited: %v\n%s", err, logs.String())
		default:
		}
		if m := listening.FindStringSubmatch(logs.String()); m != nil {
			return m[1]
		}
	}
	t.Fatalf("the gateway did not say where it listens in 10s:\n%s", logs.String())
	return ""
}
