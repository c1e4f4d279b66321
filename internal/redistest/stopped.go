package redistest

import (
	"fmt"
	"os"
	"strings"
	"time"
)

// WaitStopped waits up to a second until every thread of pid is stopped
// (state T in /proc), or the process is gone: kill(2) only queues SIGSTOP,
// and a thread still running could otherwise answer one more request.
// Without /proc it returns at once.
func WaitStopped(pid int) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if allStopped(pid) {
			return
		}
		time.Sleep(50 * time.Microsecond)
	}
}

func allStopped(pid int) bool {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return true // gone
	}
	for _, task := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
		if err != nil {
			continue // the thread exited
		}
		// "tid (comm) S …": the state follows the last ')'.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 || i+2 >= len(b) || (b[i+2] != 'T' && b[i+2] != 't') {
			return false
		}
	}
	return true
}
