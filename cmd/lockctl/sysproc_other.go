//go:build unix && !linux

package main

import "syscall"

// sysProcAttr puts COMMAND in a process group of its own (see runCommand).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
