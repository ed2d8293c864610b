package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/pkg/types"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/subnetenv"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "nodenet-cni-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := nettest.CheckNoLeaks(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

var builds sync.Map // tags -> func() (string, error)

// binary builds the plugin once per set of build tags and returns its path,
// named "nodenet" so it is found as the config's "type".
func binary(t testing.TB, tags string) string {
	t.Helper()
	f, _ := builds.LoadOrStore(tags, sync.OnceValues(func() (string, error) {
		dir := filepath.Join(binDir, "bin"+strings.ReplaceAll(tags, ",", "-"))
		out := filepath.Join(dir, "nodenet")
		args := []string{"build", "-o", out}
		if tags != "" {
			args = append(args, "-tags", tags)
		}
		cmd := exec.Command("go", append(args, ".")...)
		// Static, as CNI plugins are shipped: a cgo build spends a
		// millisecond in the dynamic loader on every exec.
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("go build: %v\n%s", err, b)
		}
		return out, nil
	}))
	path, err := f.(func() (string, error))()
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// TestLean: the plugin links neither client-go nor etcd (nor net/http), so
// it starts in milliseconds on every pod creation. Nor, since a plugin
// process lives for one command and its start-up is a third of it: the
// reference CNI library and plugin helpers (package cni speaks the
// protocol itself), regexp, the netlink library and package net (package
// cni writes its rtnetlink messages itself); each of them measurably
// slowed every exec.
func TestLean(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/nodenet/nodenet/cni") {
		t.Fatalf("go list -deps looks wrong: %v", deps)
	}
	if slices.Contains(deps, "net") {
		t.Error("nodenet-cni depends on package net")
	}
	for _, d := range deps {
		for _, banned := range []string{"k8s.io/client-go", "go.etcd.io", "google.golang.org/grpc", "net/http",
			"github.com/containernetworking/cni", "github.com/containernetworking/plugins", "regexp", "github.com/vishvananda"} {
			if d == banned || strings.HasPrefix(d, banned+"/") {
				t.Errorf("nodenet-cni depends on %s", d)
			}
		}
	}
}

// node is a host namespace with a subnet.env, for the binary.
type node struct {
	host       *nettest.NS
	dir        string
	subnetFile string
	dataDir    string
}

// newNode writes a subnet.env for subnet, dual-stack with
// fd00:10:244:1::/64 when dual.
func newNode(t *testing.T, subnet string, dual bool) *node {
	t.Helper()
	dir := t.TempDir()
	n := &node{host: nettest.New(t), dir: dir, subnetFile: filepath.Join(dir, "subnet.env"), dataDir: filepath.Join(dir, "networks")}
	var nw6, sn6 netip.Prefix
	if dual {
		nw6, sn6 = netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("fd00:10:244:1::/64")
	}
	env := subnetenv.FromSubnets(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix(subnet), nw6, sn6, 1450, true)
	if err := subnetenv.Write(n.subnetFile, env); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) conf(version string) []byte {
	return fmt.Appendf(nil, `{"cniVersion":%q,"name":"cbr0","type":"nodenet","subnetFile":%q,"dataDir":%q}`, version, n.subnetFile, n.dataDir)
}

// invocation is one exec of the plugin the way a runtime does it.
type invocation struct {
	bin, command, id, netns string
	stdin                   []byte
	env                     []string
}

func (inv invocation) cmd() *exec.Cmd {
	c := exec.Command(inv.bin)
	c.Env = append([]string{"CNI_COMMAND=" + inv.command, "CNI_CONTAINERID=" + inv.id, "CNI_NETNS=" + inv.netns,
		"CNI_IFNAME=eth0", "CNI_PATH=" + filepath.Dir(inv.bin) + ":/usr/lib/cni", "PATH=" + os.Getenv("PATH")}, inv.env...)
	c.Stdin = bytes.NewReader(inv.stdin)
	return c
}

// run execs the plugin from a thread inside the node's host namespace and
// returns stdout, stderr and the CNI error (decoded from stdout) if it
// failed.
func (n *node) run(inv invocation) (stdout, stderr []byte, cniErr *types.Error) {
	var out, errb bytes.Buffer
	err := n.host.Do(func() error {
		c := inv.cmd()
		c.Stdout, c.Stderr = &out, &errb
		return c.Run()
	})
	if err != nil {
		var te types.Error
		if jerr := json.Unmarshal(out.Bytes(), &te); jerr != nil {
			return out.Bytes(), errb.Bytes(), &types.Error{Code: 999, Msg: fmt.Sprintf("%v, stdout %q, stderr %q", err, out.Bytes(), errb.Bytes())}
		}
		return out.Bytes(), errb.Bytes(), &te
	}
	return out.Bytes(), errb.Bytes(), nil
}

func TestVersionCommand(t *testing.T) {
	out, err := exec.Command(binary(t, "")).Output()
	if err != nil || len(out) != 0 {
		t.Fatalf("no CNI_COMMAND: %v %q", err, out)
	}
	c := invocation{bin: binary(t, ""), command: "VERSION"}.cmd()
	out, err = c.Output()
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		CNIVersion        string   `json:"cniVersion"`
		SupportedVersions []string `json:"supportedVersions"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.CNIVersion != "1.1.0" || !slices.Equal(v.SupportedVersions, []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}) {
		t.Fatalf("VERSION printed %s (%v)", out, err)
	}
}

// TestBinaryErrors: bad input through the real binary gives a CNI error
// object on stdout with the spec's code, a message naming the problem,
// exit status 1, and leaves nothing behind.
func TestBinaryErrors(t *testing.T) {
	bin := binary(t, "")
	n := newNode(t, "10.244.1.0/24", false)
	pod := nettest.New(t)
	good := n.conf("1.1.0")
	for _, tc := range []struct {
		name string
		inv  invocation
		code uint
		msg  string
	}{
		{"no container id", invocation{command: "ADD", netns: pod.Path(), stdin: good}, 4, "CNI_CONTAINERID"},
		{"unknown command", invocation{command: "FROB", id: "x", netns: pod.Path(), stdin: good}, 4, "FROB"},
		{"bad netns", invocation{command: "ADD", id: "x", netns: "/run/netns/nnt-nope", stdin: good}, 4, "nnt-nope"},
		{"bad json", invocation{command: "ADD", id: "x", netns: pod.Path(), stdin: []byte("{")}, 6, ""},
		{"bad type", invocation{command: "ADD", id: "x", netns: pod.Path(), stdin: bytes.Replace(good, []byte(`"nodenet"`), []byte(`"bridge"`), 1)}, 7, "bridge"},
		{"old version", invocation{command: "ADD", id: "x", netns: pod.Path(), stdin: n.conf("0.2.0")}, 1, "incompatible"},
		{"GC needs 1.1", invocation{command: "GC", stdin: n.conf("1.0.0")}, 1, "GC"},
		{"no subnet.env", invocation{command: "ADD", id: "x", netns: pod.Path(), stdin: bytes.Replace(good, []byte("subnet.env"), []byte("nope.env"), 1)}, 11, "nope.env"},
		{"STATUS without subnet.env", invocation{command: "STATUS", stdin: bytes.Replace(good, []byte("subnet.env"), []byte("nope.env"), 1)}, 50, "nope.env"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.inv.bin = bin
			out, _, cniErr := n.run(tc.inv)
			if cniErr == nil {
				t.Fatalf("succeeded: %s", out)
			}
			if cniErr.Code != tc.code || !strings.Contains(cniErr.Msg+cniErr.Details, tc.msg) {
				t.Fatalf("got %+v, want code %d mentioning %q", cniErr, tc.code, tc.msg)
			}
		})
	}
	if l, _ := n.host.Handle().LinkList(); len(l) != 1 {
		t.Errorf("failed commands left links in the host namespace: %d", len(l))
	}
	if entries, _ := os.ReadDir(filepath.Join(n.dataDir, "cbr0")); len(entries) > 1 {
		t.Errorf("failed commands left reservations: %v", entries)
	}
}
