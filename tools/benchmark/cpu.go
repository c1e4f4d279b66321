package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc CPU times: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuSample is the machine's busy CPU time and the part of it spent by
// lockbench and each process it started, in seconds.
type cpuSample struct {
	at     time.Time
	busy   float64
	ours   float64
	byProc map[string]float64 // "lockbench" and each running child by name
}

func (b *bench) sampleCPU() cpuSample {
	s := cpuSample{at: time.Now(), busy: machineBusy(), byProc: map[string]float64{}}
	s.byProc["lockbench"] = processCPU(os.Getpid())
	named := map[int]bool{os.Getpid(): true}
	for _, p := range b.procs {
		if !p.exited() {
			s.byProc[p.name] = processCPU(p.cmd.Process.Pid)
			named[p.cmd.Process.Pid] = true
		}
	}
	// The redis-servers (and Sentinels) come from internal/redistest, not
	// b.procs: count them by command name, or their work would read as
	// other processes keeping the machine busy.
	for _, pid := range descendants(os.Getpid()) {
		if !named[pid] {
			if comm := strings.TrimSpace(readFile(fmt.Sprintf("/proc/%d/comm", pid))); comm != "" {
				s.byProc[comm] += processCPU(pid)
			}
		}
	}
	for _, v := range s.byProc {
		s.ours += v
	}
	return s
}

// cpuUse is what the machine spent between samples, in CPU seconds.
type cpuUse struct {
	secs   float64            // wall-clock seconds
	other  float64            // by processes lockbench did not start
	byProc map[string]float64 // by lockbench and each child, by name
}

func cpuBetween(from, to cpuSample) cpuUse {
	u := cpuUse{secs: to.at.Sub(from.at).Seconds(), byProc: map[string]float64{}}
	// A process started between the samples counts from zero, which can
	// only make "other" smaller.
	u.other = max((to.busy-from.busy)-(to.ours-from.ours), 0)
	for name, end := range to.byProc {
		u.byProc[name] = end - from.byProc[name]
	}
	return u
}

func (u *cpuUse) add(v cpuUse) {
	u.secs += v.secs
	u.other += v.other
	if u.byProc == nil {
		u.byProc = map[string]float64{}
	}
	for name, used := range v.byProc {
		u.byProc[name] += used
	}
}

// otherCores is how many cores, on average, processes lockbench did not
// start kept busy: other work on the machine, which skews what was
// measured meanwhile.
func (u cpuUse) otherCores() float64 {
	if u.secs <= 0 {
		return 0
	}
	return u.other / u.secs
}

// perCycle is each process's CPU time per cycle, in microseconds;
// processes that used (next to) none are left out: under 1% of what all
// of them used. The bar is relative to the round, not a fixed 20 ms as it
// was: a short round on a busy machine runs few cycles, and the process
// serving them (the smoke test's 100 ms curve points: 11 ms for the
// baseline) fell under a fixed bar and read as using nothing.
func (u cpuUse) perCycle(cycles int64) map[string]float64 {
	if cycles == 0 {
		return nil
	}
	var total float64
	for _, used := range u.byProc {
		total += max(used, 0)
	}
	out := map[string]float64{}
	for name, used := range u.byProc {
		if used > 0 && used >= total/100 {
			out[name] = used / float64(cycles) * 1e6
		}
	}
	return out
}

// descendants lists the processes below pid (children, theirs, …), from
// each process's parent in /proc/<pid>/stat.
func descendants(pid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat := readFile(fmt.Sprintf("/proc/%d/stat", p))
		i := strings.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(stat[i+1:]) // f[1] is field 4 (ppid)
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			children[pp] = append(children[pp], p)
		}
	}
	var out []int
	for todo := children[pid]; len(todo) > 0; {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		out = append(out, p)
		todo = append(todo, children[p]...)
	}
	return out
}

// machineBusy is the CPU time all cores spent not idle, from /proc/stat.
func machineBusy() float64 {
	line, _, _ := strings.Cut(readFile("/proc/stat"), "\n")
	f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal …
	if len(f) < 8 || f[0] != "cpu" {
		return 0
	}
	var busy float64
	for i, v := range f[1:] {
		if i == 3 || i == 4 || i >= 8 { // idle, iowait, and guest (already in user)
			continue
		}
		n, _ := strconv.ParseFloat(v, 64)
		busy += n
	}
	return busy / clockTicks
}

// processCPU is a process's CPU time in seconds: the time its threads ran,
// in nanoseconds from /proc/<pid>/task/*/schedstat, so a short row is not
// rounded to whole clock ticks (10 ms: a 300 ms smoke row could read 0);
// or, where schedstat is missing, user+system time from /proc/<pid>/stat
// in ticks. (A thread that exits takes its schedstat time with it; the Go
// processes measured here keep theirs.)
func processCPU(pid int) float64 {
	if ns := schedstatCPU(pid); ns > 0 {
		return ns / 1e9
	}
	return statCPU(pid)
}

// schedstatCPU sums the first field of each thread's schedstat: the
// nanoseconds it spent on a CPU. 0 when unreadable.
func schedstatCPU(pid int) float64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return 0
	}
	var total float64
	for _, t := range tasks {
		f := strings.Fields(readFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name())))
		if len(f) == 0 {
			continue
		}
		n, _ := strconv.ParseFloat(f[0], 64)
		total += n
	}
	return total
}

// statCPU is user+system CPU time from /proc/<pid>/stat, including its
// threads and the children it waited for, in clock ticks.
func statCPU(pid int) float64 {
	stat := readFile(fmt.Sprintf("/proc/%d/stat", pid))
	// The command name may hold spaces; fields resume after its ")".
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(stat[i+1:]) // f[0] is field 3 (state)
	if len(f) < 15 {
		return 0
	}
	var total float64
	for _, j := range []int{11, 12, 13, 14} { // utime stime cutime cstime
		n, _ := strconv.ParseFloat(f[j], 64)
		total += n
	}
	return total / clockTicks
}
