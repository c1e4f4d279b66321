//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package handlers

import "syscall"

// peerClosed cannot peek here: only a closed request context tells.
func peerClosed(syscall.Conn) bool { return false }
