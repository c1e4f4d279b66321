package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/lockgateway/lockgateway/client"
)

// Exit codes. 64–78 follow BSD sysexits.h where one fits. `run` passes the
// command's own status through, so a command that itself exits with one of
// these codes is ambiguous; lockctl says on stderr when the code is its own.
const (
	exitOK          = 0
	exitFree        = 1   // status: the lock is free
	exitUsage       = 64  // EX_USAGE: bad flags or arguments
	exitInvalid     = 65  // EX_DATAERR: the gateway refused the request as malformed or out of range (400, 413, 415, 422, 428)
	exitUnavailable = 69  // EX_UNAVAILABLE: the gateway cannot be reached, or its backend is down (503)
	exitSoftware    = 70  // EX_SOFTWARE: an unexpected answer (500, …)
	exitNotAcquired = 75  // EX_TEMPFAIL: held by someone else (also after --wait), or rate limited
	exitLost        = 76  // the lock was lost (run), or is not held by this token (extend, release)
	exitNoPerm      = 77  // EX_NOPERM: the API key is missing, unknown, or may not use this key (401, 403)
	exitCannotExec  = 126 // run: the command was found but could not be started
	exitNotFound    = 127 // run: the command was not found
)

const usage = `usage: lockctl [--url URL] [--json] COMMAND [flags] KEY

Commands:
  acquire [--ttl D] [--wait D] [--owner S] [--token T] KEY
        take the lock; prints "export LOCK_KEY=…" lines for LOCK_KEY,
        LOCK_TOKEN, LOCK_FENCE and LOCK_EXPIRES_AT, quoted for a POSIX shell's
        eval "$(lockctl acquire …)", or the lease as JSON with --json;
        on failure it prints a statement that unsets them and fails the
        eval with acquire's exit status (not with --json, nor to a terminal)
  extend [--ttl D] [--token T] KEY
        extend a lease you hold (token: --token or $LOCK_TOKEN)
  release [--token T] KEY
        release a lease you hold (token: --token or $LOCK_TOKEN)
  status KEY
        who holds the lock (never its token); exit status 1 when it is free
  watch KEY
        print each change of the lock as a line (acquired, extended,
        released, expired; the first line is the current state), as JSON
        with --json, until interrupted (exit status 0)
  run [--ttl D] [--wait D] [--owner S] [--grace D] [-n N] [--hold-at-least D] [--quiet]
      KEY -- COMMAND [ARG...]
        take the lock (waiting up to --wait), run COMMAND with LOCK_KEY,
        LOCK_TOKEN and LOCK_FENCE in its environment, hold the lock through
        the gateway's event stream (the gateway renews it every TTL/3),
        forward SIGINT/SIGTERM to COMMAND, release the lock when COMMAND
        exits. The moment the lock is lost (the stream says lost, or ends
        otherwise, or breaks, or stays silent until the lease's end),
        COMMAND's process group gets SIGTERM, then SIGKILL after --grace,
        and run exits 76. If lockctl dies, the gateway releases the lock at
        once (and on Linux COMMAND is killed). With -n N, the same under
        one of N permits of the semaphore KEY (/semaphores/KEY): at most N
        such commands run at once

Flags (before or after COMMAND):
  --url URL    the gateway (default $LOCKGW_URL, else http://127.0.0.1:8080);
               $LOCKGW_API_KEY, when set, is sent as a Bearer API key
  --json       machine-readable output on stdout (errors too)
  --ttl D      lease length, a Go duration (300ms, 30s, 2m); default: the
               gateway's (30s; for run, its hold TTL, 5s: how long the key
               outlives a gateway that dies while holding it)
  --wait D     wait up to D for a held lock (default 0: try once)
  --owner S    label shown by status (default: this host's name; run adds
               its process id)
  --token T    acquire: your own token (22-128 of A-Z a-z 0-9 _ -), so that a
               retry is safe; extend, release: the lease's token
  --grace D    run: time between SIGTERM and SIGKILL to COMMAND's process
               group when the lock is lost (default 5s)
  -n N         run: take a permit of a semaphore of limit N (1-10000)
               instead of the lock
  --hold-at-least D
               run: keep the lock at least D after it was granted, even when
               COMMAND exits sooner (it may then last up to its TTL): a job
               that took a second still keeps a host whose cron fired a
               second later from running it again. If lockctl dies, the
               lock is then left to expire (within the TTL), not released
  --quiet      run: print nothing when the lock is held by another (exit
               status 75 all the same): cron mails any output

Exit status:
  0    success; run: COMMAND exited 0
  1    status: the lock is free
  N    run: COMMAND's own exit status (128+S when killed by signal S)
  64   usage error
  65   the gateway refused the request as invalid (bad key, TTL out of range)
  69   the gateway is unreachable, or its backend is down
  70   unexpected answer from the gateway
  75   not acquired: held by someone else (after --wait; run -n: all N
       permits held, or the holders use another N), or rate limited
  76   lock lost (run), or not held by this token (extend, release)
  77   API key missing, unknown, or not allowed this key
  126  run: COMMAND could not be started; 127: COMMAND not found
  130  interrupted (SIGINT) before COMMAND started; 143 for SIGTERM
`

// globals are the flags every command takes.
type globals struct {
	url    string
	json   bool
	stdout io.Writer
	stderr io.Writer
}

// run is the whole program: main only calls it. It owns SIGINT and SIGTERM
// while it runs: before a command is started they interrupt it (exit
// 128+signal); `run` forwards them to its command.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	fs := g.flagSet("lockctl")
	if err := fs.Parse(args); err != nil {
		return usageError(g, err)
	}
	args = fs.Args()
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)

	cmd, args := args[0], args[1:]
	switch cmd {
	case "acquire":
		return g.acquire(ctx, args, sigs)
	case "extend":
		return g.extend(ctx, args, sigs)
	case "release":
		return g.release(ctx, args, sigs)
	case "status":
		return g.status(ctx, args, sigs)
	case "watch":
		return g.watch(ctx, args, sigs)
	case "run":
		return g.runCommand(ctx, args, stdin, sigs)
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return exitOK
	}
	return usageError(g, fmt.Errorf("unknown command %q", cmd))
}

func (g *globals) flagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // usageError prints the message and the usage
	if g.url == "" {
		g.url = os.Getenv("LOCKGW_URL")
		if g.url == "" {
			g.url = "http://127.0.0.1:8080"
		}
	}
	fs.StringVar(&g.url, "url", g.url, "gateway URL")
	fs.BoolVar(&g.json, "json", g.json, "JSON output")
	return fs
}

// parse parses flags placed before or after the positional arguments, and
// returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			return pos, nil
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
}

func oneKey(fs *flag.FlagSet, args []string) (string, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return "", err
	}
	if len(pos) != 1 {
		return "", fmt.Errorf("%s takes one KEY, not %d arguments", fs.Name(), len(pos))
	}
	return pos[0], nil
}

func (g *globals) client() (*client.Client, error) {
	var opts []client.ClientOption
	if key := os.Getenv("LOCKGW_API_KEY"); key != "" {
		opts = append(opts, client.WithAPIKey(key))
	}
	return client.New(g.url, opts...)
}

// interruptible returns ctx, cancelled with a signalError when SIGINT or
// SIGTERM arrives, and a func to stop listening.
func interruptible(ctx context.Context, sigs <-chan os.Signal) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			cancel(signalError{s.(syscall.Signal)})
		case <-done:
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

type signalError struct{ sig syscall.Signal }

func (e signalError) Error() string { return "interrupted by " + e.sig.String() }

func (g *globals) acquire(ctx context.Context, args []string, sigs <-chan os.Signal) int {
	fs := g.flagSet("acquire")
	var opts client.AcquireOptions
	fs.DurationVar(&opts.TTL, "ttl", 0, "lease length")
	fs.DurationVar(&opts.Wait, "wait", 0, "how long to wait for a held lock")
	fs.StringVar(&opts.Owner, "owner", hostname(), "holder label")
	fs.StringVar(&opts.Token, "token", "", "your own token")
	key, c, err := g.keyArgs(fs, args)
	if err != nil {
		return g.evalFailure(usageError(g, err))
	}
	ctx, stop := interruptible(ctx, sigs)
	defer stop()
	endProgress := g.progress(ctx, c, key, opts.Wait)
	lease, err := c.Acquire(ctx, key, opts)
	endProgress()
	if err != nil {
		return g.evalFailure(g.fail(ctx, "acquire", key, err))
	}
	g.printLease(lease)
	return exitOK
}

// evalFailure makes a failed acquire fail its eval too, and returns code.
// `eval "$(lockctl acquire KEY)"` runs what acquire prints, and eval of
// nothing succeeds, even under set -e: the script would go on without the
// lock. So a failed acquire prints a shell statement that unsets the
// variables a success exports (a LOCK_TOKEN left from an earlier lease must
// not be used) and then fails with acquire's own exit status, in a
// subshell, so that an interactive shell stays open. Nothing is printed
// with --json, or to a terminal, where nobody evaluates it.
func (g *globals) evalFailure(code int) int {
	if code == exitOK || g.json || isTerminal(g.stdout) {
		return code
	}
	fmt.Fprintf(g.stdout, "unset LOCK_KEY LOCK_TOKEN LOCK_FENCE LOCK_EXPIRES_AT; (exit %d)\n", code)
	return code
}

// keyArgs reads what a command on one key needs: the key (after the flags)
// and the client.
func (g *globals) keyArgs(fs *flag.FlagSet, args []string) (string, *client.Client, error) {
	key, err := oneKey(fs, args)
	if err != nil {
		return "", nil, err
	}
	c, err := g.client()
	return key, c, err
}

// holderArgs reads what a command acting for the lease's holder needs: the
// key (after the flags) and the token (--token or $LOCK_TOKEN).
func (g *globals) holderArgs(fs *flag.FlagSet, args []string, cmd string, token *string) (string, *client.Client, error) {
	key, err := oneKey(fs, args)
	if err != nil {
		return "", nil, err
	}
	if *token == "" {
		return "", nil, fmt.Errorf("%s needs the lease's token: --token or $LOCK_TOKEN", cmd)
	}
	c, err := g.client()
	return key, c, err
}

func (g *globals) extend(ctx context.Context, args []string, sigs <-chan os.Signal) int {
	fs := g.flagSet("extend")
	var ttl time.Duration
	fs.DurationVar(&ttl, "ttl", 0, "new lease length")
	token := fs.String("token", os.Getenv("LOCK_TOKEN"), "the lease's token")
	key, c, err := g.holderArgs(fs, args, "extend", token)
	if err != nil {
		return usageError(g, err)
	}
	ctx, stop := interruptible(ctx, sigs)
	defer stop()
	lease, err := c.Extend(ctx, key, *token, ttl)
	if err != nil {
		return g.fail(ctx, "extend", key, err)
	}
	g.printLease(lease)
	return exitOK
}

func (g *globals) release(ctx context.Context, args []string, sigs <-chan os.Signal) int {
	fs := g.flagSet("release")
	token := fs.String("token", os.Getenv("LOCK_TOKEN"), "the lease's token")
	key, c, err := g.holderArgs(fs, args, "release", token)
	if err != nil {
		return usageError(g, err)
	}
	ctx, stop := interruptible(ctx, sigs)
	defer stop()
	if err := c.Release(ctx, key, *token); err != nil {
		return g.fail(ctx, "release", key, err)
	}
	if g.json {
		g.printJSON(map[string]any{"key": key, "released": true})
	} else {
		fmt.Fprintf(g.stdout, "released %s\n", key)
	}
	return exitOK
}

func (g *globals) status(ctx context.Context, args []string, sigs <-chan os.Signal) int {
	fs := g.flagSet("status")
	key, c, err := g.keyArgs(fs, args)
	if err != nil {
		return usageError(g, err)
	}
	ctx, stop := interruptible(ctx, sigs)
	defer stop()
	info, err := c.Inspect(ctx, key)
	if errors.Is(err, client.ErrNotHeld) {
		if g.json {
			g.printJSON(map[string]any{"key": key, "held": false})
		} else {
			fmt.Fprintf(g.stdout, "%s: free\n", key)
		}
		return exitFree
	}
	if err != nil {
		return g.fail(ctx, "status", key, err)
	}
	if g.json {
		out := map[string]any{
			"key": info.Key, "held": true, "fence": info.Fence,
			"ttl_ms": info.TTL.Milliseconds(), "expires_at": info.ExpiresAt,
		}
		if info.Owner != "" {
			out["owner"] = info.Owner
		}
		g.printJSON(out)
		return exitOK
	}
	owner := info.Owner
	if owner == "" {
		owner = "(no owner label)"
	}
	fmt.Fprintf(g.stdout, "%s: held by %s, fence %d, %v left (until %s)\n",
		info.Key, owner, info.Fence, info.TTL.Round(time.Millisecond), info.ExpiresAt.Format(time.RFC3339Nano))
	return exitOK
}

// jsonLease is the lease as the API shows it.
type jsonLease struct {
	Key       string    `json:"key"`
	Token     string    `json:"token"`
	Fence     int64     `json:"fence"`
	Owner     string    `json:"owner,omitempty"`
	TTLMs     int64     `json:"ttl_ms"`
	ExpiresAt time.Time `json:"expires_at"`
}

func (g *globals) printLease(l *client.Lease) {
	if g.json {
		g.printJSON(jsonLease{l.Key, l.Token, l.Fence, l.Owner, l.TTL.Milliseconds(), l.ExpiresAt})
		return
	}
	// Exported shell assignments: after eval "$(lockctl acquire KEY)" the
	// next lockctl, a child of the shell, finds $LOCK_TOKEN. Every value is
	// quoted for the shell; the owner is left out.
	fmt.Fprintf(g.stdout, "export LOCK_KEY=%s\nexport LOCK_TOKEN=%s\nexport LOCK_FENCE=%d\nexport LOCK_EXPIRES_AT=%s\n",
		shellQuote(l.Key), shellQuote(l.Token), l.Fence, shellQuote(l.ExpiresAt.UTC().Format(time.RFC3339Nano)))
}

func (g *globals) printJSON(v any) {
	enc := json.NewEncoder(g.stdout)
	_ = enc.Encode(v)
}

// fail reports err and returns its exit code.
func (g *globals) fail(ctx context.Context, op, key string, err error) int {
	code := exitCode(err)
	var sig signalError
	if errors.As(context.Cause(ctx), &sig) {
		code = 128 + int(sig.sig)
		err = sig
	}
	msg := fmt.Sprintf("%s %s: %v", op, key, err)
	var e *client.Error
	if errors.As(err, &e) && e.RetryAfter > 0 && (errors.Is(err, client.ErrHeld) || errors.Is(err, client.ErrSemaphoreFull) || errors.Is(err, client.ErrRateLimited)) {
		msg += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	if e != nil && e.Status == http.StatusUnauthorized {
		if os.Getenv("LOCKGW_API_KEY") == "" {
			msg += "; this gateway asks for an API key: set LOCKGW_API_KEY to yours (export LOCKGW_API_KEY=…)"
		} else {
			msg += "; the gateway does not accept the key in LOCKGW_API_KEY: check that it is the whole key, for this gateway"
		}
	}
	fmt.Fprintf(g.stderr, "lockctl: %s\n", msg)
	if g.json {
		out := map[string]any{"error": msg, "exit_code": code}
		if e != nil {
			out["status"] = e.Status
			if e.Type != "" {
				out["problem_type"] = e.Type
			}
			if e.RetryAfter > 0 {
				out["retry_after_ms"] = e.RetryAfter.Milliseconds()
			}
		}
		g.printJSON(out)
	}
	return code
}

// exitCode maps an error of the client to lockctl's exit status.
func exitCode(err error) int {
	var e *client.Error
	switch {
	case errors.Is(err, client.ErrHeld), errors.Is(err, client.ErrRateLimited),
		errors.Is(err, client.ErrSemaphoreFull), errors.Is(err, client.ErrLimitMismatch):
		return exitNotAcquired
	case errors.Is(err, client.ErrLockLost), errors.Is(err, client.ErrNotHeld), errors.Is(err, client.ErrTokenMismatch):
		return exitLost
	case errors.Is(err, client.ErrUnavailable):
		return exitUnavailable
	case errors.As(err, &e) && (e.Status == http.StatusUnauthorized || e.Status == http.StatusForbidden):
		return exitNoPerm
	case errors.As(err, &e) && e.Status >= 400 && e.Status < 500:
		return exitInvalid
	}
	return exitSoftware
}

func usageError(g *globals, err error) int {
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprint(g.stdout, usage)
		return exitOK
	}
	fmt.Fprintf(g.stderr, "lockctl: %v\nRun 'lockctl help' for usage.\n", err)
	return exitUsage
}

func hostname() string {
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return strings.ToValidUTF8(h, "?")
}

// shellQuote returns s as one word for a POSIX shell: as is when every
// character is plainly safe, else in single quotes, each ' inside closed,
// escaped with a backslash and reopened.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_-./:+,@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
