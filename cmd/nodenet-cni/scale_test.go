package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nodenet/nodenet/cni"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/ipam/hostlocal"
)

const scalePods = 200

// parallel runs fn(i) for i in [0, n) all at once and collects errors.
func parallel(n int, fn func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = fn(i) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (n *node) reservations(t *testing.T) []hostlocal.Reservation {
	t.Helper()
	s, err := hostlocal.Open(n.dataDir, "cbr0")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	res, err := s.Reservations()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// settledVeths waits (bounded) for the background reapers DEL starts to
// delete the pairs it cut off, then lists the veths left.
func (n *node) settledVeths(t *testing.T, want int) []string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := n.veths(t)
		if len(v) <= want || time.Now().After(deadline) {
			return v
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (n *node) veths(t *testing.T) []string {
	t.Helper()
	ls, err := n.host.Handle().LinkList()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, l := range ls {
		if l.Type() == "veth" {
			out = append(out, l.Attrs().Name)
		}
	}
	return out
}

// addAll runs ADD for pods[i] as container "scale-i" from separate
// processes at once and returns the addresses.
func (n *node) addAll(t *testing.T, bin string, pods []*nettest.NS, skip map[int]bool) []string {
	t.Helper()
	ips := make([]string, len(pods))
	err := parallel(len(pods), func(i int) error {
		if skip[i] {
			return nil
		}
		out, stderr, cniErr := n.run(invocation{bin: bin, command: "ADD", id: fmt.Sprintf("scale-%d", i), netns: pods[i].Path(), stdin: n.conf("1.1.0")})
		if cniErr != nil {
			return fmt.Errorf("ADD %d: %v (stderr %s)", i, cniErr, stderr)
		}
		var r current.Result
		if err := json.Unmarshal(out, &r); err != nil || len(r.IPs) != 1 {
			return fmt.Errorf("ADD %d result %s: %v", i, out, err)
		}
		ips[i] = r.IPs[0].Address.IP.String()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ips
}

func (n *node) delAll(t *testing.T, bin string, pods []*nettest.NS) {
	t.Helper()
	err := parallel(len(pods), func(i int) error {
		if _, stderr, cniErr := n.run(invocation{bin: bin, command: "DEL", id: fmt.Sprintf("scale-%d", i), netns: pods[i].Path(), stdin: n.conf("1.1.0")}); cniErr != nil {
			return fmt.Errorf("DEL %d: %v (stderr %s)", i, cniErr, stderr)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestParallelAddsAndKill: 200 ADDs from 200 processes at once get 200
// distinct addresses; 200 DELs empty the store. Then the same with one ADD
// killed (SIGKILL) after it reserved its address and created its veth: GC
// with the runtime's 199 live attachments leaves no leaked address and no
// leaked veth, and a retried ADD of a killed attachment takes its address
// back.
func TestParallelAddsAndKill(t *testing.T) {
	bin := binary(t, "")
	held := binary(t, "nodenet_cnitest")
	n := newNode(t, "10.244.0.0/23", false) // 509 usable addresses
	pods := make([]*nettest.NS, scalePods)
	for i := range pods {
		pods[i] = nettest.New(t)
	}

	start := time.Now()
	ips := n.addAll(t, bin, pods, nil)
	t.Logf("%d parallel ADDs in %v", scalePods, time.Since(start))
	distinct := slices.Compact(slices.Sorted(slices.Values(ips)))
	if len(distinct) != scalePods || distinct[0] == "" {
		t.Fatalf("%d distinct addresses for %d pods", len(distinct), scalePods)
	}
	if got := len(n.reservations(t)); got != scalePods {
		t.Fatalf("%d reservations", got)
	}
	if got := len(n.veths(t)); got != scalePods {
		t.Fatalf("%d veths", got)
	}
	start = time.Now()
	n.delAll(t, bin, pods)
	t.Logf("%d parallel DELs in %v", scalePods, time.Since(start))
	if res, veths := n.reservations(t), n.settledVeths(t, 0); len(res) != 0 || len(veths) != 0 {
		t.Fatalf("after DEL: reservations %v, veths %v", res, veths)
	}

	// Round two: pod 0's ADD is killed mid-way while the others run.
	marker := filepath.Join(n.dir, "held")
	var pid int
	if err := n.host.Do(func() error {
		inv := invocation{bin: held, command: "ADD", id: "scale-0", netns: pods[0].Path(), stdin: n.conf("1.1.0"), env: []string{"NODENET_CNI_TEST_HOLD=" + marker}}
		c := inv.cmd()
		if err := c.Start(); err != nil {
			return err
		}
		pid = c.Process.Pid
		go c.Wait()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ips = n.addAll(t, bin, pods, map[int]bool{0: true})
	if distinct := slices.Compact(slices.Sorted(slices.Values(ips[1:]))); len(distinct) != scalePods-1 {
		t.Fatalf("round two: %d distinct addresses for %d pods", len(distinct), scalePods-1)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(marker); err == nil && strings.TrimSpace(string(b)) == strconv.Itoa(pid) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the held ADD never reached its hold point")
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if got := len(n.reservations(t)); got != scalePods {
		t.Fatalf("before GC: %d reservations, want %d (199 + the killed one)", got, scalePods)
	}
	if _, err := n.host.Handle().LinkByName(cni.HostVethName("scale-0", "eth0")); err != nil {
		t.Fatalf("the killed ADD left no veth to clean up: %v", err)
	}
	var valid []types.GCAttachment
	for i := 1; i < scalePods; i++ {
		valid = append(valid, types.GCAttachment{ContainerID: fmt.Sprintf("scale-%d", i), IfName: "eth0"})
	}
	gc, _ := json.Marshal(map[string]any{"cniVersion": "1.1.0", "name": "cbr0", "type": "nodenet", "subnetFile": n.subnetFile, "dataDir": n.dataDir, "cni.dev/valid-attachments": valid})
	if _, stderr, cniErr := n.run(invocation{bin: bin, command: "GC", stdin: gc}); cniErr != nil {
		t.Fatalf("GC: %v %s", cniErr, stderr)
	}
	res := n.reservations(t)
	if len(res) != scalePods-1 || slices.ContainsFunc(res, func(r hostlocal.Reservation) bool { return r.ContainerID == "scale-0" }) {
		t.Fatalf("after GC: %d reservations (killed one kept: %v)", len(res), slices.ContainsFunc(res, func(r hostlocal.Reservation) bool { return r.ContainerID == "scale-0" }))
	}
	if veths := n.veths(t); len(veths) != scalePods-1 || slices.Contains(veths, cni.HostVethName("scale-0", "eth0")) {
		t.Fatalf("after GC: %d veths", len(veths))
	}

	// Kill another ADD of pod 0 and retry it without GC: the retry takes
	// over the reservation and replaces the stale veth.
	os.Remove(marker)
	var reserved string
	if err := n.host.Do(func() error {
		c := invocation{bin: held, command: "ADD", id: "scale-0", netns: pods[0].Path(), stdin: n.conf("1.1.0"), env: []string{"NODENET_CNI_TEST_HOLD=" + marker}}.cmd()
		if err := c.Start(); err != nil {
			return err
		}
		defer c.Wait()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if _, err := os.Stat(marker); err == nil {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("held ADD never reached its hold point")
			}
		}
		return c.Process.Kill()
	}); err != nil {
		t.Fatal(err)
	}
	for _, r := range n.reservations(t) {
		if r.ContainerID == "scale-0" {
			reserved = r.IP.String()
		}
	}
	retry := n.addAll(t, bin, pods[:1], nil)
	if reserved == "" || retry[0] != reserved {
		t.Fatalf("retried ADD got %s, the killed one had reserved %q", retry[0], reserved)
	}
	n.delAll(t, bin, pods)
	if res, veths := n.reservations(t), n.settledVeths(t, 0); len(res) != 0 || len(veths) != 0 {
		t.Fatalf("after DEL: reservations %v, veths %v", res, veths)
	}
}
