package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/app"
	"github.com/nodenet/nodenet/proxy/proxycmd"
)

func TestInstallCNI(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "nodenet-cni")
	bin := filepath.Join(dir, "opt", "cni", "bin")
	if err := os.WriteFile(src, []byte("plugin v1"), 0o700); err != nil {
		t.Fatal(err)
	}
	args := []string{"--source", src, "--cni-bin-dir", bin}
	if err := runInstallCNI(t.Context(), args); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"nodenet", "flannel"} {
		st, err := os.Stat(filepath.Join(bin, n))
		if err != nil || st.Mode().Perm() != 0o755 {
			t.Fatalf("%s: %v %v", n, st, err)
		}
	}
	before, _ := os.Stat(filepath.Join(bin, "nodenet"))
	if err := runInstallCNI(t.Context(), args); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.Stat(filepath.Join(bin, "nodenet")); !os.SameFile(before, after) {
		t.Error("an identical plugin was replaced")
	}
	if err := os.WriteFile(src, []byte("plugin v2"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := runInstallCNI(t.Context(), append(args, "--names", "nodenet")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(bin, "nodenet")); string(b) != "plugin v2" {
		t.Errorf("not updated: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(bin, "flannel")); string(b) != "plugin v1" {
		t.Errorf("a name not asked for was touched: %q", b)
	}
	if err := runInstallCNI(t.Context(), append(args, "--names", "../evil")); err == nil || !strings.Contains(err.Error(), "not a path") {
		t.Errorf("a path as a name: %v", err)
	}
	if err := runInstallCNI(t.Context(), []string{"--source", filepath.Join(dir, "missing"), "--cni-bin-dir", bin}); err == nil {
		t.Error("a missing source installed")
	}
}

// TestManifestProxyModes: every mode nodenet defines is built in and
// renders (the manifest is for other machines, so this kernel's IPVS or
// BPF support is not asked); an unknown mode does not.
func TestManifestProxyModes(t *testing.T) {
	for _, mode := range app.KnownModes {
		if err := runManifest(t.Context(), []string{"--proxy-mode", mode}); err != nil {
			t.Errorf("--proxy-mode %s: %v", mode, err)
		}
	}
	if err := runManifest(t.Context(), []string{"--proxy-mode", "userspace"}); err == nil {
		t.Fatal("an unknown mode rendered")
	}
}

// TestManifestNodePortAddresses: the manifest's --nodeport-addresses is the
// proxy's flag, so what the ConfigMap carries is what the proxy accepts,
// and a bad value fails at parsing, naming the flag.
func TestManifestNodePortAddresses(t *testing.T) {
	if err := runManifest(t.Context(), []string{"--nodeport-addresses", "10.0.0.1"}); err == nil || !strings.Contains(err.Error(), "nodeport-addresses") {
		t.Fatalf("an address without a prefix length: %v", err)
	}
	var got proxy.NodePortAddresses
	f := &proxycmd.NodePortFlag{Dst: &got}
	if err := f.Set("10.0.0.0/8,primary"); err != nil {
		t.Fatal(err)
	}
	if s := got.String(); s != "10.0.0.0/8,primary" {
		t.Fatalf("String() = %q", s)
	}
}

// TestManifestNodeSelector: a malformed --node-selector is refused, naming
// the flag.
func TestManifestNodeSelector(t *testing.T) {
	if err := runManifest(t.Context(), []string{"--node-selector", "plane"}); err == nil || !strings.Contains(err.Error(), "--node-selector") {
		t.Fatalf("a selector without a value: %v", err)
	}
	if err := runManifest(t.Context(), []string{"--node-selector", "plane=a b"}); err == nil {
		t.Fatal("a label value with a space rendered")
	}
}
