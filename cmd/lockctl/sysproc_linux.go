package main

import "syscall"

// sysProcAttr puts COMMAND in a process group of its own (see runCommand)
// and has the kernel kill it if lockctl dies: nobody would extend the lease
// any more.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
