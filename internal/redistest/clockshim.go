package redistest

import (
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// clockShimC is an LD_PRELOAD library that moves a process's wall clock
// (CLOCK_REALTIME, gettimeofday, time) by an offset in nanoseconds read from
// the 8-byte file named by $CLOCKSHIM_FILE, which it maps once: writing the
// file steps the clock of the running process at once, like an NTP step or
// an operator's `date -s`. Monotonic clocks are left alone, as a real step
// leaves them. It calls the kernel directly instead of looking the real
// functions up, since jemalloc (in Redis) reads the clock before a
// preloaded library's initializers run; libfaketime hangs Redis for that
// reason.
const clockShimC = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static volatile int64_t *offset_ns;

__attribute__((constructor)) static void clockshim_init(void) {
	const char *path = getenv("CLOCKSHIM_FILE");
	if (!path) return;
	int fd = open(path, O_RDONLY);
	if (fd < 0) return;
	void *p = mmap(NULL, 8, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (p != MAP_FAILED) offset_ns = p;
}

static void shift(struct timespec *ts) {
	if (!offset_ns) return;
	int64_t ns = (int64_t)ts->tv_sec * 1000000000 + ts->tv_nsec + *offset_ns;
	ts->tv_sec = ns / 1000000000;
	ts->tv_nsec = ns % 1000000000;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int r = (int)syscall(SYS_clock_gettime, id, ts);
	if (r == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) shift(ts);
	return r;
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

// BuildClockShim compiles the clock shim into dir with the C compiler
// ($CC, else cc) and returns the library's path, for Options.ClockShim.
func BuildClockShim(dir string) (string, error) {
	src := filepath.Join(dir, "clockshim.c")
	lib := filepath.Join(dir, "clockshim.so")
	if err := os.WriteFile(src, []byte(clockShimC), 0o644); err != nil {
		return "", err
	}
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "cc"
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-o", lib, src).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("redistest: compile the clock shim with %s (a C compiler is needed: apt-get install gcc libc6-dev): %v: %s",
			cc, err, strings.TrimSpace(string(out)))
	}
	return lib, nil
}

// SetClock steps the server's wall clock to the host's plus offset, at
// once, as an NTP step or an operator would: keys expire by the new clock
// and Redis TIME (which seeds fences) reads it. The server must run on the
// clock shim (Options.ClockShim).
func (s *Server) SetClock(offset time.Duration) {
	s.helper()
	if s.clock == "" {
		s.fatalf("redistest: SetClock on a server started without the clock shim")
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(int64(offset)))
	f, err := os.OpenFile(s.clock, os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteAt(b[:], 0)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		s.fatalf("redistest: set clock: %v", err)
	}
}
