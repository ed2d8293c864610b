package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nettest"
)

// TestCleanupCommand runs `nodenet cleanup` in a throwaway namespace laid
// out as a node after an uninstall — flanneld's vxlan device, routes,
// masquerade chain, subnet.env and conflist; the CNI plugin's bridge,
// reservations and binaries; the nftables proxy's table — next to things
// that are not nodenet's. With a port on the bridge it exits non-zero
// naming it, having removed everything else; once the port is gone the
// next run removes the bridge, and a third has nothing to do.
func TestCleanupCommand(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "iptables-save")
	nettest.RequireTool(t, "nft")
	ns := nettest.New(t)
	dir := t.TempDir()
	files := nodeFiles(t, dir)
	for _, cmd := range [][]string{
		{"ip", "link", "add", "keep0", "type", "bridge"},
		{"ip", "addr", "add", "192.168.9.1/24", "dev", "keep0"},
		{"ip", "link", "set", "keep0", "up"},
		{"ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472", "nolearning"},
		{"ip", "link", "set", "flannel.1", "up"},
		{"ip", "route", "add", "10.244.2.0/24", "via", "10.244.2.0", "dev", "flannel.1", "onlink", "proto", "78"},
		{"ip", "route", "add", "10.244.3.0/24", "via", "192.168.9.3", "proto", "78"},
		{"ip", "route", "add", "10.99.0.0/24", "via", "192.168.9.4", "proto", "78"},
		{"ip", "route", "add", "10.244.4.0/24", "via", "192.168.9.5", "proto", "static"},
		{"ip", "link", "add", "cni0", "type", "bridge"},
		{"ip", "link", "add", "vethpod", "master", "cni0", "type", "veth", "peer", "name", "podeth"},
		{"iptables", "-t", "nat", "-N", "NODENET-FLANNEL-MASQ"},
		{"iptables", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "nodenet flanneld masq", "-j", "NODENET-FLANNEL-MASQ"},
		{"iptables", "-t", "nat", "-A", "POSTROUTING", "-m", "comment", "--comment", "not nodenet", "-j", "RETURN"},
		{"nft", "add", "table", "ip", "nodenet-proxy"},
		{"nft", "add", "table", "ip", "someone-else"},
	} {
		ns.MustExec(t, cmd[0], cmd[1:]...)
	}
	args := []string{"cleanup", "--net-config-path", filepath.Join(dir, "absent.json"), "--subnet-file", files.subnetEnv,
		"--install-cni-conf", files.conflist, "--cni-bin-dir", files.binDir, "--cni-data-dir", files.dataDir}

	out, code := runIn(t, ns, args...)
	if code == 0 || !strings.Contains(out, "pods still attached") || !strings.Contains(out, "vethpod") {
		t.Fatalf("with a pod attached: exit %d, want non-zero naming the port; output:\n%s", code, out)
	}
	if _, err := ns.Handle().LinkByName("cni0"); err != nil {
		t.Errorf("bridge removed under a pod: %v", err)
	}
	checkRemoved(t, ns, files)
	routes := string(ns.MustExec(t, "ip", "route"))
	for _, gone := range []string{"10.244.2.0/24", "10.244.3.0/24"} {
		if strings.Contains(routes, gone) {
			t.Errorf("route %s left:\n%s", gone, routes)
		}
	}
	for _, kept := range []string{"10.99.0.0/24", "10.244.4.0/24"} {
		if !strings.Contains(routes, kept) {
			t.Errorf("route %s (not flanneld's) removed:\n%s", kept, routes)
		}
	}
	if nat := string(ns.MustExec(t, "iptables-save", "-t", "nat")); strings.Contains(nat, "NODENET") || !strings.Contains(nat, "not nodenet") {
		t.Errorf("nat table after cleanup:\n%s", nat)
	}
	if tables := string(ns.MustExec(t, "nft", "list", "tables")); strings.Contains(tables, "nodenet-proxy") || !strings.Contains(tables, "someone-else") {
		t.Errorf("nft tables after cleanup:\n%s", tables)
	}

	ns.MustExec(t, "ip", "link", "del", "vethpod")
	if out, code := runIn(t, ns, args...); code != 0 || !strings.Contains(out, "bridge cni0") {
		t.Fatalf("after the pod: exit %d, output:\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(files.dataDir, "cbr0")); !os.IsNotExist(err) {
		t.Errorf("reservations left: %v", err)
	}
	out, code = runIn(t, ns, args...)
	if code != 0 || strings.Contains(out, "removed") {
		t.Errorf("third run: exit %d, want nothing removed; output:\n%s", code, out)
	}
	for _, link := range []string{"keep0", "lo"} {
		if _, err := ns.Handle().LinkByName(link); err != nil {
			t.Errorf("%s: %v", link, err)
		}
	}
}

type cleanupFiles struct {
	subnetEnv, conflist, binDir, dataDir string
}

func nodeFiles(t *testing.T, dir string) cleanupFiles {
	t.Helper()
	f := cleanupFiles{subnetEnv: filepath.Join(dir, "subnet.env"), conflist: filepath.Join(dir, "10-nodenet.conflist"),
		binDir: filepath.Join(dir, "bin"), dataDir: filepath.Join(dir, "networks")}
	self, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	for path, data := range map[string][]byte{
		f.subnetEnv:                                    []byte("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"),
		f.conflist:                                     []byte(`{"name":"cbr0"}`),
		filepath.Join(f.binDir, "nodenet"):             self,
		filepath.Join(f.binDir, "flannel"):             self,
		filepath.Join(f.dataDir, "cbr0", "10.244.1.2"): []byte("c1\r\neth0"),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func checkRemoved(t *testing.T, ns *nettest.NS, f cleanupFiles) {
	t.Helper()
	for _, p := range []string{f.subnetEnv, f.conflist, filepath.Join(f.binDir, "nodenet"), filepath.Join(f.binDir, "flannel")} {
		if _, err := os.Stat(p); !os.IsNotExist(err) {
			t.Errorf("%s left (%v)", p, err)
		}
	}
	if _, err := ns.Handle().LinkByName("flannel.1"); err == nil {
		t.Error("flannel.1 left")
	}
}

// runIn runs this binary as nodenet with args inside ns and returns its
// combined output and exit code.
func runIn(t *testing.T, ns *nettest.NS, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "NODENET_TEST_EXEC=1")
	var out nettest.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := netnsutil.Start(ns.Path(), cmd); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if exit, ok := err.(*exec.ExitError); ok {
		return out.String(), exit.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), 0
}

// TestFlanneldCleanupFlag: `flanneld --cleanup` needs no subnet-manager
// flag or API, works on --netns and is idempotent; `cleanup` refuses
// stray arguments before touching anything.
func TestFlanneldCleanupFlag(t *testing.T) {
	if err := runCleanup(t.Context(), []string{"now"}); err == nil || !strings.Contains(err.Error(), "unexpected arguments") {
		t.Errorf("cleanup now: %v", err)
	}
	nettest.RequirePrivileged(t)
	ns := nettest.New(t)
	ns.MustExec(t, "ip", "link", "add", "flannel.1", "type", "vxlan", "id", "1", "dstport", "8472")
	env := filepath.Join(t.TempDir(), "subnet.env")
	if err := os.WriteFile(env, []byte("FLANNEL_NETWORK=10.244.0.0/16\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		err := runFlanneld(t.Context(), []string{"--cleanup", "--netns", ns.Name(), "--subnet-file", env, "--net-config-path", env + ".absent", "--log-level", "error"})
		if err != nil {
			t.Fatalf("run %d: %v", i+1, err)
		}
	}
	if _, err := ns.Handle().LinkByName("flannel.1"); err == nil {
		t.Error("flannel.1 left")
	}
	if _, err := os.Stat(env); !os.IsNotExist(err) {
		t.Errorf("subnet.env left: %v", err)
	}
}
