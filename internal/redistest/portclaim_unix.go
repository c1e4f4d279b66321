//go:build unix

package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// claimPort takes a lock of port's own (a file in the temporary directory
// locked with flock) for as long as the returned file stays open, and
// reports false when another server, of this process or another, holds it.
// A server keeps its claim across Kill and Start, so that while it is down
// for a restart no other test binary's server (make test runs several side
// by side) takes its port, and the clients of the first talk to the second:
// "Redlock node … was last used with the node list …". The kernel drops
// the lock when the process ends. Without a lock directory the claim is
// granted unlocked (nil file).
func claimPort(port int) (*os.File, bool) {
	dir := filepath.Join(os.TempDir(), "redistest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, true
	}
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	return f, true
}
