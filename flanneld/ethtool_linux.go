package flanneld

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ethtool ioctl commands (linux/ethtool.h). The legacy TX checksum
// commands still work and toggle every NETIF_F_CSUM_MASK feature, which
// is what `ethtool -K dev tx off` does; no ethtool binary is needed.
const (
	ethtoolGTXCSUM = 0x16
	ethtoolSTXCSUM = 0x17
)

type ethtoolValue struct {
	cmd  uint32
	data uint32
}

type ifreqData struct {
	name [unix.IFNAMSIZ]byte
	data uintptr
	_    [16]byte
}

// txChecksum sets (or with set=false only reads) TX checksum offload of
// dev in ns. Whether the vxlan devices keep it is decided in
// txcsum_linux.go: with offload on, some kernels corrupt the outer UDP
// checksum of NATed VXLAN packets and Service traffic through them is
// dropped (flannel #1279, #2152); with it off, throughput drops tenfold.
func txChecksum(ns Netns, dev string, set, on bool) (bool, error) {
	var cur bool
	err := ns.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("ethtool socket: %w", err)
		}
		defer unix.Close(fd)
		if set {
			v := ethtoolValue{cmd: ethtoolSTXCSUM}
			if on {
				v.data = 1
			}
			if err := ethtoolIoctl(fd, dev, &v); err != nil {
				return fmt.Errorf("ethtool set tx checksum of %s: %w", dev, err)
			}
		}
		v := ethtoolValue{cmd: ethtoolGTXCSUM}
		if err := ethtoolIoctl(fd, dev, &v); err != nil {
			return fmt.Errorf("ethtool get tx checksum of %s: %w", dev, err)
		}
		cur = v.data != 0
		return nil
	})
	return cur, err
}

func ethtoolIoctl(fd int, dev string, v *ethtoolValue) error {
	var ifr ifreqData
	copy(ifr.name[:unix.IFNAMSIZ-1], dev)
	ifr.data = uintptr(unsafe.Pointer(v))
	_, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr)))
	runtime.KeepAlive(v)
	if errno != 0 {
		return errno
	}
	return nil
}
