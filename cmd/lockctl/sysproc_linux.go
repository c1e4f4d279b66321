package main

import "syscall"

// sysProcAttr puts COMMAND in a process group of its own (see runCommand)
// and has the kernel kill it if lockctl dies: lockctl's hold stream closes
// with it, and the gateway releases the lock at once.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
