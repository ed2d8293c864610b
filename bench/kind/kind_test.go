package main

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/bench/kind/report"
)

// These tests are the tool's CI self-test: no Docker, no builds, no
// network.

func TestParseArgs(t *testing.T) {
	o, err := parseArgs([]string{"up", "-backend", "vxlan", "-proxy-modes", "nftables,iptables"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.cmd != "up" || strings.Join(o.backends, ",") != "vxlan" || strings.Join(o.modes, ",") != "nftables,iptables" || o.runs != 3 {
		t.Fatalf("got %+v", o)
	}
	if o, err := parseArgs([]string{"bench", "-backend", "host-gw,vxlan"}, io.Discard); err != nil || len(o.backends) != 2 {
		t.Fatalf("bench with two backends: %+v, %v", o, err)
	}
	for _, bad := range [][]string{{}, {"nope"}, {"up", "-backend", "ipip"}, {"bench", "-proxy-modes", "ipvs"},
		{"bench", "-runs", "0"}, {"down", "extra"}, {"up", "-backend", "host-gw,vxlan"}} {
		if _, err := parseArgs(bad, io.Discard); err == nil {
			t.Errorf("%q: accepted", bad)
		}
	}
}

func TestKeyChangesWithEveryInput(t *testing.T) {
	a := key(map[string]string{"module": "k8s.io/kubernetes@v1.37.2", "go": "go1.26"})
	if a != key(map[string]string{"go": "go1.26", "module": "k8s.io/kubernetes@v1.37.2"}) {
		t.Fatal("key depends on map order")
	}
	for _, other := range []map[string]string{
		{"module": "k8s.io/kubernetes@v1.37.3", "go": "go1.26"},
		{"module": "k8s.io/kubernetes@v1.37.2", "go": "go1.27"},
		{"module": "k8s.io/kubernetes@v1.37.2go", "": "1.26"}, // same bytes, split differently
	} {
		if key(other) == a {
			t.Errorf("%v: same key as the original", other)
		}
	}
	if kubernetesRecipe().key() == etcdRecipe().key() || len(a) != 12 {
		t.Fatal("recipes share a key or key length changed")
	}
}

func TestCacheCompleteAndStale(t *testing.T) {
	c := cache{root: t.TempDir()}
	k1, k2 := key(map[string]string{"v": "1"}), key(map[string]string{"v": "2"})
	for _, k := range []string{k1, k2} {
		if err := os.MkdirAll(c.dir("go-kind", k), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(c.root, "go-kindred-"+k1), 0o755)
	if c.complete("go-kind", k2) {
		t.Fatal("complete before the stamp")
	}
	if err := c.markComplete("go-kind", k2); err != nil {
		t.Fatal(err)
	}
	if !c.complete("go-kind", k2) || c.complete("go-kind", k1) {
		t.Fatal("stamp not per key")
	}
	stale, err := c.stale("go-kind", k2)
	if err != nil || len(stale) != 1 || filepath.Base(stale[0]) != "go-kind-"+k1 {
		t.Fatalf("stale = %v, %v", stale, err)
	}
}

func TestContainerdConfig(t *testing.T) {
	in := "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\"]\n  sandbox_image = \"registry.k8s.io/pause:3.10\"\n  restrict_oom_score_adj = false\n"
	out, err := containerdConfig(in, "registry.k8s.io/pause:3.10.1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, `sandbox_image = "registry.k8s.io/pause:3.10.1"`) || !strings.Contains(out, "restrict_oom_score_adj = true") ||
		strings.Contains(out, "= false") {
		t.Fatalf("config:\n%s", out)
	}
	if _, err := containerdConfig("version = 2\n", "x"); err == nil {
		t.Fatal("a config without the lines was accepted")
	}
}

func TestCRIBaseSpec(t *testing.T) {
	out, err := criBaseSpec([]byte(`{"process":{"rlimits":[{"type":"RLIMIT_NOFILE"}],"cwd":"/"},"hooks":{"createContainer":[{"path":"/a"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	var spec struct {
		Process map[string]any
		Hooks   map[string][]map[string]string
	}
	if err := json.Unmarshal(out, &spec); err != nil {
		t.Fatal(err)
	}
	if _, ok := spec.Process["rlimits"]; ok || spec.Process["cwd"] != "/" {
		t.Fatalf("process: %v", spec.Process)
	}
	if h := spec.Hooks["createContainer"]; len(h) != 2 || h[1]["path"] != "/kind/bin/mount-product-files.sh" {
		t.Fatalf("hooks: %v", spec.Hooks)
	}
}

func TestParseMirror(t *testing.T) {
	deb822 := "Types: deb\nURIs: http://mirror.example/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\nTypes: deb\nURIs: http://security.example/debian-security\nSuites: bookworm-security\n"
	if m := parseMirror(bufio.NewScanner(strings.NewReader(deb822)), true); m != "http://mirror.example/debian" {
		t.Errorf("deb822: %q", m)
	}
	list := "# comment\ndeb [arch=amd64 signed-by=/k.gpg] http://security.example/x bookworm-security main\ndeb http://mirror.example/debian bookworm main\n"
	if m := parseMirror(bufio.NewScanner(strings.NewReader(list)), false); m != "http://mirror.example/debian" {
		t.Errorf("one-line: %q", m)
	}
	if m := parseMirror(bufio.NewScanner(strings.NewReader("Types: deb\nURIs: http://x\nSuites: trixie\n")), true); m != "" {
		t.Errorf("other suite: %q", m)
	}
}

func TestParseNetperf(t *testing.T) {
	v, err := parseNetperf("catcher: timer popped with times_up != 0\n9381.27\n")
	if err != nil || v != 9381.27 {
		t.Fatalf("%v %v", v, err)
	}
	if _, err := parseNetperf("establish control: are you sure there is a netserver listening\n"); err == nil {
		t.Fatal("an error message parsed as a figure")
	}
}

// TestWrapperRewritesPrivileged runs the generated wrapper against a fake
// docker that prints its arguments.
func TestWrapperRewritesPrivileged(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	dir := t.TempDir()
	fake := filepath.Join(dir, "real-docker")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\nfor a in \"$@\"; do echo \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	w := filepath.Join(dir, "docker")
	if err := os.WriteFile(w, []byte(wrapperScript(fake, "/empty")), 0o755); err != nil {
		t.Fatal(err)
	}
	args := func(a ...string) []string {
		out, err := exec.Command(w, a...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	got := strings.Join(args("run", "--privileged", "--volume", "/lib/modules:/lib/modules:ro", "img"), " ")
	want := "run " + strings.Join(privilegedFlags, " ") + " --volume /empty:/lib/modules:ro img"
	if got != want {
		t.Errorf("run:\n got %s\nwant %s", got, want)
	}
	if got := strings.Join(args("exec", "--privileged", "-i", "node", "ctr", "--privileged"), " "); got != "exec -i node ctr" {
		t.Errorf("exec: %s", got)
	}
	if got := strings.Join(args("ps", "--privileged"), " "); got != "ps --privileged" {
		t.Errorf("other commands must pass through: %s", got)
	}
}

func TestComponentFor(t *testing.T) {
	for ref, want := range map[string]string{
		"registry.k8s.io/kube-apiserver:v1.37.2":  "kube-apiserver",
		"registry.k8s.io/etcd:3.6.5-0":            "etcd",
		"registry.k8s.io/pause:3.10.1":            "pause",
		"registry.k8s.io/coredns/coredns:v1.12.1": "",
		"registry.k8s.io/kube-proxy:v1.37.2":      "kube-proxy",
	} {
		if got := componentFor(ref); got != want {
			t.Errorf("%s: %q, want %q", ref, got, want)
		}
	}
}

// TestReportFromRecordedData regenerates the report from testdata and
// checks the figures a reader relies on.
func TestReportFromRecordedData(t *testing.T) {
	d, err := report.Load("testdata/results.json")
	if err != nil {
		t.Fatal(err)
	}
	files, err := renderReport(d)
	if err != nil {
		t.Fatal(err)
	}
	md := files["kind-netperf.md"]
	for _, want := range []string{
		"| pod-pod same node | – | 950 ±2% (95%) | 955 ±0% (96%) |", // median, spread, share of the 1000 Mbit/s baseline
		"| node-node | 1000 ±20% |",
		"![TCP_STREAM](kind-netperf-tcp_stream.svg)",
		"| kubernetes | v1.37.2 |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	if _, ok := files["kind-netperf-tcp_crr.svg"]; ok {
		t.Error("chart for a test that did not run")
	}
	svg := files["kind-netperf-tcp_rr.svg"]
	if !strings.HasPrefix(svg, "<svg") || !strings.Contains(svg, "share of the node-to-node baseline") || !strings.Contains(svg, ">75%<") {
		t.Errorf("TCP_RR chart (15000 of 20000 is 75%%):\n%s", svg)
	}
	if _, err := renderReport(report.Data{}); err == nil {
		t.Error("empty data reported")
	}
	out := t.TempDir()
	if err := writeReport(options{data: "testdata/results.json", out: out}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(out, "kind-netperf.md")); err != nil {
		t.Fatal(err)
	}
}
