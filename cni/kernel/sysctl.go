package kernel

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Sysctl reads a /proc/sys value (name with slashes) of the calling
// thread's namespace, without the runtime poller os.ReadFile would
// register the file with.
func Sysctl(name string) (string, error) {
	fd, err := unix.Open("/proc/sys/"+name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	defer unix.Close(fd)
	var buf [64]byte
	n, err := unix.Read(fd, buf[:])
	if err != nil {
		return "", fmt.Errorf("read %s: %w", name, err)
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

// SetSysctl writes a /proc/sys value of the calling thread's namespace.
func SetSysctl(name, value string) error {
	fd, err := unix.Open("/proc/sys/"+name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	defer unix.Close(fd)
	if _, err := unix.Write(fd, []byte(value)); err != nil {
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// EnableForwarding turns on routing for the families asked for in the
// calling thread's namespace. It writes only when needed: the value is
// per namespace and shared with everything else on the node.
func EnableForwarding(v4, v6 bool) error {
	for _, f := range []struct {
		on   bool
		name string
	}{{v4, "net/ipv4/ip_forward"}, {v6, "net/ipv6/conf/all/forwarding"}} {
		if !f.on {
			continue
		}
		cur, err := Sysctl(f.name)
		if err == nil && cur == "1" {
			continue
		}
		if err := SetSysctl(f.name, "1"); err != nil {
			return fmt.Errorf("enable forwarding: %w", err)
		}
	}
	return nil
}
