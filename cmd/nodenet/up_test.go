package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/cluster"
)

// TestParseUpRefusesBadOptions checks that every option of `nodenet up` is
// validated before anything starts, with a message naming what is
// accepted. It needs no root: parseUp touches nothing.
func TestParseUpRefusesBadOptions(t *testing.T) {
	// The test binary stands in for both binaries: only "is an executable
	// file" is checked before the cluster starts.
	base := []string{"--cni-plugin", os.Args[0]}
	foreign := t.TempDir()
	if err := os.WriteFile(filepath.Join(foreign, "thesis.tex"), []byte("precious"), 0o644); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "plain-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		args []string
		want []string // substrings of the error
	}{
		{[]string{"--proxy-mode", "userspace"}, []string{`"userspace": unknown mode`, "iptables", "none"}},
		{[]string{"--backend", "udp"}, []string{`--backend "udp": want one of host-gw, vxlan`}},
		{[]string{"--nodes", "0"}, []string{"--nodes 0: want 1 to 200"}},
		{[]string{"--nodes", "201"}, []string{"--nodes 201: want 1 to 200"}},
		{[]string{"--name", "My_Cluster"}, []string{`--name "My_Cluster": want 1-32 lowercase`}},
		{[]string{"--api-port", "70000"}, []string{"--api-port 70000: want 1-65535, or 0"}},
		{[]string{"--lb-ip-pool", "10.244.9.0/24"}, []string{"overlaps the pod network 10.244.0.0/16"}},
		{[]string{"--lb-ip-pool", "10.100.0.0/24"}, []string{"overlaps the Service network 10.96.0.0/12"}},
		{[]string{"--lb-ip-pool", "172.30.0.8/29"}, []string{"contains 172.30.0.11 (node-1)", "pick a range above them"}},
		{[]string{"--nodes", "5", "--lb-ip-pool", "172.30.0.14/31"}, []string{"contains 172.30.0.14 (node-4)"}},
		{[]string{"--lb-ip-pool", "172.30.0.240/28"}, []string{"contains 172.30.0.255 (the node network's broadcast address)"}},
		{[]string{"--lb-ip-pool", "172.30.0.225/28"}, []string{"host bits set (did you mean 172.30.0.224/28?)"}},
		{[]string{"--lb-ip-pool", "fd00:1::/120"}, []string{"IPv4-only"}},
		{[]string{"--lb-ip-pool", "many"}, []string{`--lb-ip-pool "many": want an IPv4 CIDR`}},
		{[]string{"--dir", foreign}, []string{"is not a nodenet state directory (it holds thesis.tex)"}},
		{[]string{"--dir", file}, []string{"--dir " + file}},
		{[]string{"--demo", "--demo-pods", "0"}, []string{"--demo-pods 0: want at least 1"}},
		{[]string{"3"}, []string{"unexpected arguments [3]"}},
		{[]string{"--cni-plugin", file}, []string{"is not an executable file"}},
		{[]string{"--node-monitor-grace-period", "5s"}, []string{"--node-monitor-grace-period 5s: want at least 20s"}},
		{[]string{"--node-monitor-grace-period", "-1m"}, []string{"--node-monitor-grace-period -1m0s: want at least 20s"}},
		// Every problem at once, not one per attempt.
		{[]string{"--backend", "udp", "--proxy-mode", "userspace", "--nodes", "0"}, []string{"--backend", "--proxy-mode", "--nodes"}},
	}
	// The nodes share this kernel: without IPVS the ipvs mode is refused
	// up front, saying what is missing.
	if _, err := os.Stat("/proc/net/ip_vs"); err != nil {
		cases = append(cases, struct {
			args []string
			want []string
		}{[]string{"--proxy-mode", "ipvs"}, []string{"--proxy-mode=ipvs", "the kernel has no IPVS (ip_vs)"}})
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			args := append(append([]string{}, base...), "--dir", filepath.Join(t.TempDir(), "state"))
			_, err := parseUp(append(args, c.args...))
			if err == nil {
				t.Fatalf("accepted")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
	if b, err := os.ReadFile(filepath.Join(foreign, "thesis.tex")); err != nil || string(b) != "precious" {
		t.Errorf("a refused --dir was changed: %q, %v", b, err)
	}
}

func TestParseUpAcceptsGoodOptions(t *testing.T) {
	earlier := t.TempDir() // an earlier cluster's state directory
	for _, f := range []string{"cluster.json", "net-conf.json"} {
		if err := os.WriteFile(filepath.Join(earlier, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{
		{"--dir", filepath.Join(t.TempDir(), "new")},
		{"--dir", t.TempDir(), "--nodes", "1", "--backend", "vxlan", "--proxy-mode", "nftables"},
		{"--dir", earlier, "--proxy-mode", "none", "--nodes", "200", "--api-port", "0"},
		{"--dir", t.TempDir(), "--lb-ip-pool", "192.168.77.0/24", "--demo", "--demo-exit"},
		{"--dir", t.TempDir(), "--node-monitor-grace-period", "25s"},
	} {
		o, err := parseUp(append([]string{"--cni-plugin", os.Args[0]}, args...))
		if err != nil {
			t.Errorf("%v: %v", args, err)
			continue
		}
		wantGrace := cluster.DefaultNodeMonitorGracePeriod
		if args[len(args)-1] == "25s" {
			wantGrace = 25 * time.Second
		}
		if o.cfg.NodeMonitorGracePeriod != wantGrace {
			t.Errorf("%v: node monitor grace period %s, want %s", args, o.cfg.NodeMonitorGracePeriod, wantGrace)
		}
		if !filepath.IsAbs(o.cfg.Dir) || o.cfg.LBPool == "" || o.cfg.Name != "local" {
			t.Errorf("%v: defaults not filled in: %+v", args, o.cfg)
		}
	}
}
