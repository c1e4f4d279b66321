package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/lockgateway/lockgateway/client"
)

// runCommand is `lockctl run`: COMMAND runs only while the lock is held.
// The lock is held through the gateway's event stream (client.Hold): the
// gateway renews the lease, and the moment the stream says lost (or breaks,
// or stays silent until the lease's end) COMMAND gets SIGTERM, then
// SIGKILL after --grace. If lockctl dies, its stream closes and the
// gateway releases the lock at once.
//
// COMMAND runs in a process group of its own, and signals go to the whole
// group: a shell script's children (rsync, psql, …) stop with it. A shell
// waiting for a foreground child only acts on SIGTERM once the child is
// done, so signalling the script alone would leave the real work running
// without the lock — what consul lock and etcdctl lock users get.
//
// The price: COMMAND is not in the terminal's foreground group, so an
// interactive COMMAND that reads the terminal stops (SIGTTIN). lockctl is
// for jobs, not editors.
func (g *globals) runCommand(ctx context.Context, args []string, stdin io.Reader, sigs <-chan os.Signal) int {
	flags := g.flagSet("run")
	var opts client.AcquireOptions
	flags.DurationVar(&opts.TTL, "ttl", 0, "the hold's lease length (default: the gateway's hold TTL)")
	flags.DurationVar(&opts.Wait, "wait", 0, "how long to wait for a held lock")
	flags.StringVar(&opts.Owner, "owner", fmt.Sprintf("%s:%d", hostname(), os.Getpid()), "holder label")
	grace := flags.Duration("grace", 5*time.Second, "SIGTERM to SIGKILL when the lock is lost")
	permits := flags.Int("n", 0, "run under one of N permits of the semaphore KEY")
	flags.DurationVar(&opts.HoldAtLeast, "hold-at-least", 0, "keep the lock at least this long after it was granted, even when COMMAND exits sooner")
	quiet := flags.Bool("quiet", false, "print nothing when another holder has the lock (the exit status is 75 all the same): for cron, which mails any output")
	sep := slices.Index(args, "--")
	if sep < 0 {
		return usageError(g, errors.New("run: put -- between KEY and the command: lockctl run [flags] KEY -- COMMAND [ARG...]"))
	}
	command := args[sep+1:]
	key, err := oneKey(flags, args[:sep])
	if err != nil {
		return usageError(g, err)
	}
	if len(command) == 0 {
		return usageError(g, errors.New("run: no command after --"))
	}
	if *grace < 0 {
		return usageError(g, errors.New("run: --grace must not be negative"))
	}
	if *permits < 0 || *permits > 10000 {
		return usageError(g, errors.New("run: -n must be between 1 and 10000"))
	}
	c, err := g.client()
	if err != nil {
		return usageError(g, err)
	}
	held := runUnder(c, *permits)

	// Until COMMAND starts, a signal interrupts lockctl; then it goes to
	// COMMAND's process group.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu   sync.Mutex
		pgid int // COMMAND's process group while it runs, else 0
	)
	go func() {
		for {
			select {
			case s := <-sigs:
				mu.Lock()
				if pgid != 0 {
					_ = syscall.Kill(-pgid, s.(syscall.Signal))
				} else {
					cancel(signalError{s.(syscall.Signal)})
				}
				mu.Unlock()
			case <-ctx.Done():
				return
			}
		}
	}()

	var (
		started  bool
		startErr error
		status   int // COMMAND's exit status
	)
	progressWait := opts.Wait
	if *permits > 0 {
		progressWait = 0 // progress names a lock's holder
	}
	endProgress := g.progress(ctx, c, key, progressWait)
	// Hold waits itself (opts.Wait), on the hold's own request: a lease
	// taken first with a plain acquire would have the gateway's default
	// TTL, which the hold could not shorten to its own.
	err = held.hold(ctx, key, opts, func(hctx context.Context, lease *client.Lease) error {
		endProgress()
		if hctx.Err() != nil { // interrupted between the grant and the start
			return context.Cause(hctx)
		}
		cmd := exec.Command(command[0], command[1:]...)
		cmd.Env = append(os.Environ(),
			"LOCK_KEY="+lease.Key,
			"LOCK_TOKEN="+lease.Token,
			"LOCK_FENCE="+strconv.FormatInt(lease.Fence, 10),
		)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = stdin, g.stdout, g.stderr
		cmd.SysProcAttr = sysProcAttr()
		// A grandchild that outlives COMMAND and keeps its output pipe open
		// must not keep lockctl (and the lock) waiting.
		cmd.WaitDelay = time.Second
		mu.Lock()
		startErr = cmd.Start()
		if startErr == nil {
			started, pgid = true, cmd.Process.Pid
		}
		mu.Unlock()
		if startErr != nil {
			return startErr
		}

		waited := make(chan struct{})
		go func() { _ = cmd.Wait(); close(waited) }()
		select {
		case <-waited:
		case <-hctx.Done():
			fmt.Fprintf(g.stderr, "lockctl: %v\nlockctl: sending SIGTERM to %s (process group %d)\n", context.Cause(hctx), command[0], pgid)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			t := time.NewTimer(*grace)
			select {
			case <-waited:
			case <-t.C:
				fmt.Fprintf(g.stderr, "lockctl: %s still running %v after SIGTERM; sending SIGKILL\n", command[0], *grace)
				_ = syscall.Kill(-pgid, syscall.SIGKILL)
				<-waited
			}
			t.Stop()
		}
		mu.Lock()
		pgid = 0
		mu.Unlock()
		status = exitStatus(cmd.ProcessState)
		return nil
	})
	endProgress()

	switch {
	case errors.Is(err, client.ErrLockLost):
		if started {
			fmt.Fprintf(g.stderr, "lockctl: run %s: lock lost; %s exited with status %d; exiting with %d\n", key, command[0], status, exitLost)
		}
		return g.fail(ctx, "run", key, err)
	case startErr != nil:
		fmt.Fprintf(g.stderr, "lockctl: run %s: %v\n", key, startErr)
		if errors.Is(startErr, exec.ErrNotFound) || errors.Is(startErr, fs.ErrNotExist) {
			return exitNotFound
		}
		return exitCannotExec
	case !started: // not acquired, or interrupted before COMMAND started
		if *quiet && exitCode(err) == exitNotAcquired && context.Cause(ctx) == nil {
			return exitNotAcquired
		}
		return g.fail(ctx, "run", key, err)
	case err != nil:
		// COMMAND ran under the lock; only the release failed, and the
		// lease ends by itself within its TTL.
		fmt.Fprintf(g.stderr, "lockctl: run %s: %v (the lock expires by itself within its TTL)\n", key, err)
	}
	return status
}

// under is what run holds: the lock KEY, or with -n N one of N permits of
// the semaphore KEY (a permit shown to COMMAND as a lease: key, token,
// fence).
type under struct {
	hold func(ctx context.Context, key string, opts client.AcquireOptions, fn func(context.Context, *client.Lease) error) error
}

func runUnder(c *client.Client, permits int) under {
	if permits == 0 {
		return under{hold: c.Hold}
	}
	asLease := func(p *client.Permit) *client.Lease {
		return &client.Lease{Key: p.Key, Token: p.Token, Fence: p.Fence, Owner: p.Owner, TTL: p.TTL, ExpiresAt: p.ExpiresAt}
	}
	return under{
		hold: func(ctx context.Context, key string, opts client.AcquireOptions, fn func(context.Context, *client.Lease) error) error {
			return c.HoldPermit(ctx, key, permits, opts, func(ctx context.Context, p *client.Permit) error { return fn(ctx, asLease(p)) })
		},
	}
}

// exitStatus is a shell's $? for a finished process: its exit code, or
// 128+N when signal N killed it.
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// progress shows, while Acquire waits and only when stderr is a terminal,
// one line saying what lockctl waits for; the returned func clears it.
// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func (g *globals) progress(ctx context.Context, c *client.Client, key string, wait time.Duration) (end func()) {
	f, ok := g.stderr.(*os.File)
	if wait <= 0 || !ok || !term.IsTerminal(int(f.Fd())) {
		return func() {}
	}
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		start := time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		var holder string
		printed := false
		for i := 0; ; i++ {
			select {
			case <-stop:
				if printed {
					fmt.Fprint(f, "\r\x1b[K")
				}
				return
			case <-tick.C:
			}
			if i%5 == 0 { // who holds it, now and then
				ictx, cancel := context.WithTimeout(ctx, time.Second)
				if info, err := c.Inspect(ictx, key); err == nil && info.Owner != "" {
					holder = " (held by " + info.Owner + ")"
				}
				cancel()
			}
			fmt.Fprintf(f, "\r\x1b[Klockctl: waiting for %s%s: %v of %v", key, holder,
				time.Since(start).Round(time.Second), wait)
			printed = true
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }
}
