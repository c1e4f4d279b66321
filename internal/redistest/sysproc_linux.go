package redistest

import (
	"os/exec"
	"syscall"
)

// dieWithParent has the kernel kill cmd when its parent dies.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
