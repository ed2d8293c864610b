package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/nodenet/nodenet/cni"
	"github.com/nodenet/nodenet/internal/nettest"
)

// countCNIRules counts CNI/nodenet lines in the root namespace's iptables
// (both backends): the libcni tests must not change it.
func countCNIRules(t *testing.T) int {
	t.Helper()
	n := 0
	for _, save := range []string{"iptables-save", "iptables-legacy-save"} {
		if _, err := exec.LookPath(save); err != nil {
			continue
		}
		out, _ := exec.Command(save).Output()
		for _, l := range strings.Split(string(out), "\n") {
			if strings.Contains(l, "CNI") || strings.Contains(l, "NODENET") {
				n++
			}
		}
	}
	return n
}

// TestLibcniWithPortmap drives a conflist of nodenet-cni + Debian's portmap
// through libcni, as containerd does: ADD, a connection through the port
// mapping, CHECK, GC, DEL. libcni runs on a thread inside the node's
// namespace, so both plugins (and portmap's iptables) act there.
func TestLibcniWithPortmap(t *testing.T) {
	nettest.RequireSysfs(t, "/usr/lib/cni/portmap")
	nettest.RequireTool(t, "iptables")
	rootRules := countCNIRules(t)
	bin := binary(t, "")
	n := newNode(t, "10.244.1.0/24", false)
	pods := []*nettest.NS{nettest.New(t), nettest.New(t)}
	// Debian's portmap speaks up to 1.0.0, which limits the list's version
	// (libcni then GCs by DEL of cached attachments, not by plugin GC).
	list, err := libcni.ConfListFromBytes(fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"cbr0","plugins":[
		{"type":"nodenet","subnetFile":%q,"dataDir":%q},
		{"type":"portmap","capabilities":{"portMappings":true},"snat":true}]}`, n.subnetFile, n.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	// Debian's portmap 1.1.1 fails every CHECK when ip6tables works: it
	// looks for its IPv4 rules in ip6tables too (containernetworking/plugins
	// #819, fixed in later releases). So CHECK runs through a list of the
	// same network without portmap; libcni still hands our plugin the
	// cached result of the whole chain as prevResult.
	checkList, err := libcni.ConfListFromBytes(fmt.Appendf(nil, `{"cniVersion":"1.0.0","name":"cbr0","plugins":[
		{"type":"nodenet","subnetFile":%q,"dataDir":%q}]}`, n.subnetFile, n.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	cc := libcni.NewCNIConfigWithCacheDir([]string{filepath.Dir(bin), "/usr/lib/cni"}, filepath.Join(n.dir, "cache"), nil)
	rt := func(i int) *libcni.RuntimeConf {
		return &libcni.RuntimeConf{ContainerID: fmt.Sprintf("libcni-%d", i), NetNS: pods[i].Path(), IfName: "eth0",
			CapabilityArgs: map[string]any{"portMappings": []map[string]any{{"hostPort": 8080 + i, "containerPort": 80, "protocol": "tcp"}}}}
	}
	ctx := context.Background()
	var results []*current.Result
	inHost := func(fn func() error) {
		t.Helper()
		if err := n.host.Do(fn); err != nil {
			t.Fatal(err)
		}
	}
	inHost(func() error {
		for i := range pods {
			res, err := cc.AddNetworkList(ctx, list, rt(i))
			if err != nil {
				return fmt.Errorf("ADD %d: %w", i, err)
			}
			r, err := current.NewResultFromResult(res)
			if err != nil {
				return err
			}
			results = append(results, r)
		}
		return nil
	})
	if got := results[1].IPs[0].Address.String(); got != "10.244.1.3/24" || results[1].Interfaces[2].Sandbox != pods[1].Path() {
		t.Fatalf("second pod result %+v", results[1])
	}
	if rules := string(n.host.MustExec(t, "iptables-save", "-t", "nat")); !strings.Contains(rules, "--dport 8080") {
		t.Fatalf("portmap did not program the node namespace:\n%s", rules)
	}

	// A connection to the node's 8080 lands on pod 0's port 80.
	var ln net.Listener
	if err := pods[0].Do(func() (err error) { ln, err = net.Listen("tcp", ":80"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := ln.Accept(); err == nil {
			io.WriteString(c, "pod0")
			c.Close()
		}
	}()
	inHost(func() error {
		c, err := net.DialTimeout("tcp", "10.244.1.1:8080", 5*time.Second)
		if err != nil {
			return fmt.Errorf("dial the port mapping: %w", err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if string(b) != "pod0" {
			return fmt.Errorf("port mapping answered %q (%v)", b, err)
		}
		return nil
	})

	inHost(func() error {
		for i := range pods {
			if err := cc.CheckNetworkList(ctx, checkList, rt(i)); err != nil {
				return fmt.Errorf("CHECK %d: %w", i, err)
			}
		}
		// GC keeps pod 0 and deletes pod 1 (libcni DELs it through the
		// whole chain, portmap included).
		return cc.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "libcni-0", IfName: "eth0"}}})
	})
	if v := n.settledVeths(t, 1); len(v) != 1 || v[0] != cni.HostVethName("libcni-0", "eth0") {
		t.Errorf("after GC want only pod 0's veth, have %v", v)
	}
	if rules := string(n.host.MustExec(t, "iptables-save", "-t", "nat")); strings.Contains(rules, "--dport 8081") || !strings.Contains(rules, "--dport 8080") {
		t.Errorf("after GC want only pod 0's mapping:\n%s", rules)
	}
	pods[0].MustExec(t, "ip", "route", "del", "default")
	if err := n.host.Do(func() error { return cc.CheckNetworkList(ctx, checkList, rt(0)) }); err == nil || !strings.Contains(err.Error(), "route 0.0.0.0/0 via 10.244.1.1 missing") {
		t.Errorf("CHECK of a pod without its default route: %v", err)
	}
	inHost(func() error {
		if err := cc.DelNetworkList(ctx, list, rt(0)); err != nil {
			return fmt.Errorf("DEL: %w", err)
		}
		return cc.DelNetworkList(ctx, list, rt(0))
	})
	if rules := string(n.host.MustExec(t, "iptables-save", "-t", "nat")); strings.Contains(rules, "--dport 808") {
		t.Errorf("port mappings left after DEL:\n%s", rules)
	}
	if v := n.settledVeths(t, 0); len(v) != 0 {
		t.Errorf("veths left after DEL: %v", v)
	}
	if res := n.reservations(t); len(res) != 0 {
		t.Errorf("reservations after DEL: %v", res)
	}
	if got := countCNIRules(t); got != rootRules {
		t.Errorf("root namespace iptables changed: %d CNI lines, was %d", got, rootRules)
	}
}

// TestLibcniGCAndStatus11: with a 1.1.0 list libcni also calls the
// plugin's GC, which frees what the cache-driven DEL cannot know about
// (here: a leaked reservation), and STATUS reports 50 without subnet.env.
func TestLibcniGCAndStatus11(t *testing.T) {
	bin := binary(t, "")
	n := newNode(t, "10.244.1.0/24", false)
	pod := nettest.New(t)
	list, err := libcni.ConfListFromBytes(fmt.Appendf(nil, `{"cniVersion":"1.1.0","name":"cbr0","plugins":[{"type":"nodenet","subnetFile":%q,"dataDir":%q}]}`, n.subnetFile, n.dataDir))
	if err != nil {
		t.Fatal(err)
	}
	cc := libcni.NewCNIConfigWithCacheDir([]string{filepath.Dir(bin)}, filepath.Join(n.dir, "cache"), nil)
	ctx := context.Background()
	rt := &libcni.RuntimeConf{ContainerID: "gc-live", NetNS: pod.Path(), IfName: "eth0"}
	if err := n.host.Do(func() error {
		if err := cc.GetStatusNetworkList(ctx, list); err != nil {
			return fmt.Errorf("STATUS: %w", err)
		}
		_, err := cc.AddNetworkList(ctx, list, rt)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	leak := filepath.Join(n.dataDir, "cbr0", "10.244.1.77")
	if err := os.WriteFile(leak, []byte("rebooted-away\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.host.Do(func() error {
		return cc.GCNetworkList(ctx, list, &libcni.GCArgs{ValidAttachments: []types.GCAttachment{{ContainerID: "gc-live", IfName: "eth0"}}})
	}); err != nil {
		t.Fatalf("GC: %v", err)
	}
	if _, err := os.Stat(leak); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plugin GC kept the leaked reservation (%v)", err)
	}
	if err := n.host.Do(func() error { return cc.CheckNetworkList(ctx, list, rt) }); err != nil {
		t.Errorf("GC broke the live pod: %v", err)
	}
	os.Remove(n.subnetFile)
	err = n.host.Do(func() error { return cc.GetStatusNetworkList(ctx, list) })
	var te *types.Error
	if !errors.As(err, &te) || te.Code != 50 {
		t.Errorf("STATUS without subnet.env: %v", err)
	}
	if err := n.host.Do(func() error { return cc.DelNetworkList(ctx, list, rt) }); err != nil {
		t.Fatal(err)
	}
}
