package cgroup2

import (
	"errors"
	"strings"
	"testing"
)

func TestMountFrom(t *testing.T) {
	for name, c := range map[string]struct {
		mountinfo, want string
		err             error
	}{
		"hybrid": {mountinfo: `25 20 0:22 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
27 25 0:24 / /sys/fs/cgroup/net_cls rw - cgroup cgroup rw,net_cls
`, want: "/sys/fs/cgroup/unified"},
		"unified": {mountinfo: "30 21 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n", want: "/sys/fs/cgroup"},
		"bind of a child first": {mountinfo: `40 21 0:26 /kubepods /var/lib/x\040y rw - cgroup2 cgroup2 rw
41 21 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw
`, want: "/sys/fs/cgroup"},
		"escaped": {mountinfo: `40 21 0:26 / /mnt/cg\040two rw - cgroup2 cgroup2 rw` + "\n", want: "/mnt/cg two"},
		"none":    {mountinfo: "25 20 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro\n", err: ErrNotMounted},
	} {
		got, err := mountFrom(strings.NewReader(c.mountinfo))
		if got != c.want || !errors.Is(err, c.err) {
			t.Errorf("%s: mountFrom = %q, %v; want %q, %v", name, got, err, c.want, c.err)
		}
	}
}
