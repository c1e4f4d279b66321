//go:build unix

package redistest

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
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
//
// A port is not claimed again within portQuarantine of its last claim
// (the file's time), even once its lock is gone: a make test run still
// saw a Redlock node refuse writes for another node list, its port freed
// by one test and taken by another while a client of the first lived on.
func claimPort(port int) (*os.File, bool) {
	dir := filepath.Join(os.TempDir(), "redistest-ports")
	if err := os.MkdirAll(dir, 0o777); err != nil {
		return nil, true
	}
	path := filepath.Join(dir, strconv.Itoa(port))
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o666)
	fresh := err == nil
	if !fresh {
		f, err = os.OpenFile(path, os.O_RDWR, 0o666)
	}
	if err != nil {
		return nil, true
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		_ = f.Close()
		return nil, false
	}
	if info, err := f.Stat(); err == nil && !fresh && time.Since(info.ModTime()) < portQuarantine {
		_ = f.Close()
		return nil, false
	}
	now := time.Now()
	_ = os.Chtimes(path, now, now)
	return f, true
}

// portQuarantine is how long after a claim its port is not claimed again:
// longer than any test's clients outlive its servers.
const portQuarantine = 10 * time.Minute
