package cni

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodenet/nodenet/cni/kernel"
)

// Deleting a veth pair takes the kernel 10-20 ms (unregistering a device
// waits for RCU grace periods), most of what a DEL would cost. So DEL cuts
// the pair off — pod end down and renamed, host end moved into
// doomedGroup — and a reaper deletes the doomed links later: every doomed
// link in one request, so the kernel unregisters many pairs for the price
// of one. See Plugin.Reaper.

// doomedGroup is the interface group ("nndc") of cut-off host ends.
const doomedGroup = 0x6e6e6463

// reaperName is an abstract unix socket a running reaper holds. Abstract
// sockets belong to a network namespace and vanish with their process,
// even a killed one: a lock without a file.
const reaperName = "@nodenet-cni-reaper"

// ReapDoomed deletes every doomed link in the calling thread's namespace.
// Nothing to delete is success.
func ReapDoomed() error {
	_, err := reapOnce()
	return err
}

// reapOnce deletes the doomed links in one request and reports whether
// there were any.
func reapOnce() (bool, error) {
	c, err := kernel.Dial()
	if err != nil {
		return false, err
	}
	defer c.Close()
	found, err := c.DeleteGroup(doomedGroup)
	if err != nil {
		return false, fmt.Errorf("delete cut-off veths: %w", err)
	}
	return found, nil
}

// holdReaperName binds the reaper socket; EADDRINUSE means another process
// holds it.
func holdReaperName() (int, error) {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if err := unix.Bind(fd, &unix.SockaddrUnix{Name: reaperName}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// ReaperRunning reports whether a reaper is at work in the calling
// thread's namespace and will see links doomed before this call, so DEL
// need not start another.
func ReaperRunning() bool {
	fd, err := holdReaperName()
	if err != nil {
		return errors.Is(err, unix.EADDRINUSE)
	}
	unix.Close(fd)
	return false
}

// reaperDelay is how long a reaper lets doomed links accumulate before its
// first pass: pods tend to go in bursts, one request deletes a whole batch
// for little more than the price of one, and the RTNL lock it holds
// meanwhile then delays the burst's other CNI commands once, not each time.
const reaperDelay = 50 * time.Millisecond

// RunReaper deletes doomed links until there are none left. While it
// works it holds the reaper socket, so DELs meanwhile only doom their links
// (ReaperRunning); after letting go it makes one more pass, which covers a
// DEL that saw it running just before it let go. Reapers that overlap do
// no harm: whichever request comes first deletes the links.
func RunReaper() error {
	fd, err := holdReaperName()
	held := err == nil
	if held {
		time.Sleep(reaperDelay)
	}
	for {
		found, err := reapOnce()
		if err != nil {
			if held {
				unix.Close(fd)
			}
			return err
		}
		switch {
		case found:
		case held:
			unix.Close(fd)
			held = false
		default:
			return nil
		}
	}
}

// deadName is a unique name for a pod interface on its way out, freeing
// its real name for a new attachment in the same namespace.
func deadName() string {
	return fmt.Sprintf("nndead%08x", rand.Uint32())
}
