package nettest

import "syscall"

// ReuseAddr is a net.Dialer Control that sets SO_REUSEADDR, so a test can
// dial again from a fixed local port whose last connection never got past
// its SYN or was reset.
func ReuseAddr(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1)
	}); err != nil {
		return err
	}
	return serr
}
