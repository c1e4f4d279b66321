//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package handlers

import "syscall"

// peerClosed peeks at the socket without reading or waiting: zero bytes is
// the client's FIN, ECONNRESET its RST; data (a pipelined request) or
// nothing yet means it is still there.
func peerClosed(c syscall.Conn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	closed := false
	// Control, not Read: net/http's own read of the connection may be
	// waiting on it, and this must neither block nor take its data.
	_ = raw.Control(func(fd uintptr) {
		var b [1]byte
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		closed = n == 0 && err == nil || err == syscall.ECONNRESET
	})
	return closed
}
