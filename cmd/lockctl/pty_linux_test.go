package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/lockgateway/lockgateway/client"
	"github.com/lockgateway/lockgateway/internal/apitest"
)

// TestProgressOnTerminal: while waiting, a progress line goes to stderr
// when it is a terminal.
func TestProgressOnTerminal(t *testing.T) {
	g := memoryGateway(t)
	c := newClient(t, g.URL)
	key := apitest.Key(t)
	held, err := c.Acquire(t.Context(), key, client.AcquireOptions{TTL: 10 * time.Second, Owner: "the-holder"})
	require.NoError(t, err)

	ptm, pts := openPTY(t)
	lines := make(chan string, 100)
	go func() {
		sc := bufio.NewScanner(ptm)
		sc.Split(scanCR)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	time.AfterFunc(1500*time.Millisecond, func() { _ = c.Release(context.Background(), key, held.Token) })
	var stdout apitest.SyncBuffer
	code := run(context.Background(), []string{"--url", g.URL, "acquire", "--wait", "5s", key}, nil, &stdout, pts)
	require.Equal(t, exitOK, code)
	require.NoError(t, pts.Close())

	var seen []string
	timeout := time.After(5 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if ok {
				seen = append(seen, l)
				if strings.Contains(l, "lockctl: waiting for "+key+" (held by the-holder): 1s of 5s") {
					return
				}
				continue
			}
		case <-timeout:
		}
		t.Fatalf("no progress line on the terminal; saw %q", seen)
	}
}

// scanCR splits at \r or \n: the progress line is rewritten with \r.
func scanCR(data []byte, atEOF bool) (int, []byte, error) {
	for i, b := range data {
		if b == '\r' || b == '\n' {
			return i + 1, data[:i], nil
		}
	}
	if atEOF && len(data) > 0 {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// openPTY opens a pseudo-terminal: the master to read what is written to
// the terminal, and the terminal itself.
func openPTY(t *testing.T) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatalf("no pseudo-terminals here (/dev/ptmx): %v", err)
	}
	t.Cleanup(func() { _ = ptm.Close() })
	var n uint32
	ioctl(t, ptm, syscall.TIOCGPTN, uintptr(unsafe.Pointer(&n)))
	var unlock int32
	ioctl(t, ptm, syscall.TIOCSPTLCK, uintptr(unsafe.Pointer(&unlock)))
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pts.Close() })
	return ptm, pts
}

func ioctl(t *testing.T, f *os.File, req, arg uintptr) {
	t.Helper()
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), req, arg); errno != 0 {
		t.Fatalf("ioctl %#x: %v", req, errno)
	}
}
