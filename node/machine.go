package node

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodenet/nodenet/internal/version"
)

// maxPods is the kubelet's default --max-pods.
const maxPods = 110

// machineFiles are the places the machine is read from; tests point them
// at fixtures.
type machineFiles struct {
	meminfo, cgroupCPUMax, cgroupMemMax, osRelease, machineID, bootID, productUUID string
}

var hostFiles = machineFiles{
	meminfo:      "/proc/meminfo",
	cgroupCPUMax: "/sys/fs/cgroup/cpu.max",
	cgroupMemMax: "/sys/fs/cgroup/memory.max",
	osRelease:    "/etc/os-release",
	machineID:    "/etc/machine-id",
	bootID:       "/proc/sys/kernel/random/boot_id",
	productUUID:  "/sys/class/dmi/id/product_uuid",
}

// capacity is what the node offers: CPUs (the cgroup's cpu.max quota when
// it is lower than the CPU count, as a container-bound kubelet would see),
// memory (MemTotal, or the cgroup's memory.max when lower), the size of the
// filesystem holding the state dir (where container logs go), and the
// kubelet's default pod limit. The local cluster's nodes all share one
// machine and so all report its full size: that is honest, not a quota.
func (f machineFiles) capacity(stateDir string) (corev1.ResourceList, error) {
	milliCPU := int64(runtime.NumCPU()) * 1000
	if q, ok := cgroupCPUQuota(f.cgroupCPUMax); ok && q < milliCPU {
		milliCPU = q
	}
	mem, err := memTotal(f.meminfo)
	if err != nil {
		return nil, err
	}
	if b, err := os.ReadFile(f.cgroupMemMax); err == nil {
		if lim, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && lim < mem {
			mem = lim
		}
	}
	var st unix.Statfs_t
	if err := unix.Statfs(stateDir, &st); err != nil {
		return nil, fmt.Errorf("statfs %s: %w", stateDir, err)
	}
	return corev1.ResourceList{
		corev1.ResourceCPU:              *resource.NewMilliQuantity(milliCPU, resource.DecimalSI),
		corev1.ResourceMemory:           *resource.NewQuantity(mem, resource.BinarySI),
		corev1.ResourceEphemeralStorage: *resource.NewQuantity(int64(st.Blocks)*st.Bsize, resource.BinarySI),
		corev1.ResourcePods:             *resource.NewQuantity(maxPods, resource.DecimalSI),
	}, nil
}

// cgroupCPUQuota reads cgroup v2 cpu.max ("max 100000" or "150000 100000")
// as millicores; ok is false when there is no limit.
func cgroupCPUQuota(path string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	quota, period, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok || quota == "max" {
		return 0, false
	}
	q, err1 := strconv.ParseInt(quota, 10, 64)
	p, err2 := strconv.ParseInt(period, 10, 64)
	if err1 != nil || err2 != nil || p <= 0 || q <= 0 {
		return 0, false
	}
	return q * 1000 / p, true
}

func memTotal(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read memory size: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		fields := strings.Fields(rest)
		if len(fields) != 2 || fields[1] != "kB" {
			return 0, fmt.Errorf("%s: unexpected MemTotal line %q", path, sc.Text())
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: MemTotal %q: %w", path, fields[0], err)
		}
		return kb * 1024, nil
	}
	return 0, fmt.Errorf("%s: no MemTotal line", path)
}

// systemInfo fills what the kubelet reports in status.nodeInfo. The
// container runtime is named for what runs the containers: this agent.
func (f machineFiles) systemInfo(runtimeVersion string) corev1.NodeSystemInfo {
	var uts unix.Utsname
	kernel := ""
	if unix.Uname(&uts) == nil {
		kernel = unix.ByteSliceToString(uts.Release[:])
	}
	if runtimeVersion == "" {
		runtimeVersion = "unknown"
	}
	return corev1.NodeSystemInfo{
		KernelVersion:           kernel,
		OSImage:                 osImage(f.osRelease),
		ContainerRuntimeVersion: "nodenet://" + runtimeVersion,
		OperatingSystem:         runtime.GOOS,
		Architecture:            runtime.GOARCH,
		MachineID:               readTrimmed(f.machineID),
		BootID:                  readTrimmed(f.bootID),
		SystemUUID:              strings.ToLower(readTrimmed(f.productUUID)),
	}
}

// osImage is PRETTY_NAME from os-release, as the kubelet reports it.
func osImage(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "Unknown"
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "PRETTY_NAME=")
		if !ok {
			continue
		}
		if u, err := strconv.Unquote(v); err == nil {
			return u
		}
		return strings.Trim(v, `"'`)
	}
	return "Unknown"
}

// readTrimmed returns a one-line file's content, or "" when it is not
// readable (systemUUID needs root; machine-id may be absent in containers).
func readTrimmed(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// setMachineStatus fills capacity, allocatable and system info. Allocatable
// equals capacity: the agent reserves nothing for itself (no
// --system-reserved/--kube-reserved) and does no eviction. A failed read
// keeps what the node reported before rather than posting zeros, which
// `kubectl describe node` would turn into nonsense percentages.
func (a *Agent) setMachineStatus(n *corev1.Node) {
	n.Status.NodeInfo = hostFiles.systemInfo(version.GitVersion)
	n.Status.NodeInfo.KubeletVersion = version.GitVersion
	capacity, err := hostFiles.capacity(a.o.StateDir)
	if err != nil {
		a.log.Warn("read node capacity", "err", err)
		return
	}
	n.Status.Capacity = capacity
	n.Status.Allocatable = capacity.DeepCopy()
}
