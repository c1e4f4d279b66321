package redistest

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// frozenClockC is an LD_PRELOAD library, loaded as the clock shim is
// (Options.ClockShim, $CLOCKSHIM_FILE), that stops a process's wall clock:
// while the 8-byte file holds a nonzero count of nanoseconds since the
// epoch, CLOCK_REALTIME, gettimeofday and time read exactly that. Redis then
// answers TIME, sets and checks expiries, all at one instant the test
// chooses and moves (FreezeClock), as a simulated node does: what lets a
// test compare a real Redis with internal/luaredis reply for reply.
// Monotonic clocks are left alone, so the event loop still runs.
const frozenClockC = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *frozen_ns;

__attribute__((constructor)) static void frozenclock_init(void) {
	const char *path = getenv("CLOCKSHIM_FILE");
	if (!path) return;
	int fd = open(path, O_RDONLY);
	if (fd < 0) return;
	void *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED) frozen_ns = p;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	if (frozen_ns && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		int64_t ns = *frozen_ns;
		if (ns != 0) {
			ts->tv_sec = ns / 1000000000;
			ts->tv_nsec = ns % 1000000000;
			return 0;
		}
	}
	return (int)syscall(SYS_clock_gettime, id, ts);
}

int gettimeofday(struct timeval *tv, void *tz) {
	(void)tz;
	struct timespec ts;
	int r = clock_gettime(CLOCK_REALTIME, &ts);
	if (r == 0 && tv) { tv->tv_sec = ts.tv_sec; tv->tv_usec = ts.tv_nsec / 1000; }
	return r;
}

time_t time(time_t *t) {
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	if (t) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

// BuildFrozenClockShim compiles the frozen clock into dir, as
// BuildClockShim does the moving one, for Options.ClockShim; the server's
// clock is then set with FreezeClock (SetClock would read as an absolute
// time).
func BuildFrozenClockShim(dir string) (string, error) {
	src := filepath.Join(dir, "frozenclock.c")
	lib := filepath.Join(dir, "frozenclock.so")
	if err := os.WriteFile(src, []byte(frozenClockC), 0o644); err != nil {
		return "", err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redistest: compile the frozen clock with %s (a C compiler is needed: apt-get install gcc libc6-dev): %v: %s",
			cc, err, strings.TrimSpace(string(out)))
	}
	return lib, nil
}

// FreezeClock stops the wall clock of a server started on the frozen
// clock (BuildFrozenClockShim) at us microseconds since the epoch; 0 lets
// it run again.
func (s *Server) FreezeClock(us int64) {
	s.helper()
	if s.clock == "" {
		s.fatalf("redistest: FreezeClock on a server started without a clock shim")
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(us*1000))
	f, err := os.OpenFile(s.clock, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(b[:], 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s.fatalf("redistest: freeze clock: %v", err)
	}
}
