package cni

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
)

func TestParseConfigCodes(t *testing.T) {
	for _, tc := range []struct {
		conf string
		code uint
		msg  string
	}{
		{`{`, CodeDecode, "decode"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","mtu":"big"}`, CodeDecode, "mtu"},
		{`{"name":"n","type":"nodenet"}`, CodeInvalidConfig, "cniVersion"},
		{`{"cniVersion":"0.2.0","name":"n","type":"nodenet"}`, CodeIncompatibleVersion, "0.2.0"},
		{`{"cniVersion":"1.0.0","type":"nodenet"}`, CodeInvalidConfig, "name"},
		{`{"cniVersion":"1.0.0","name":"a/b","type":"nodenet"}`, CodeInvalidConfig, "a/b"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan"}`, CodeInvalidConfig, "macvlan"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","bridge":"a b"}`, CodeInvalidConfig, "bridge"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","mtu":70000}`, CodeInvalidConfig, "mtu"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.128/25"}]]}`, CodeInvalidConfig, "overlap"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","ranges":[[{"subnet":"nope"}]]}`, CodeDecode, "nope"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","delegate":{}}`, CodeInvalidConfig, "delegate"},
		{`{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"type":7}}`, CodeInvalidConfig, "delegate.type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"name":"x"}}`, CodeInvalidConfig, "name"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","prevResult":{"ips":[{"address":"banana"}]}}`, CodeDecode, "prevResult"},
	} {
		_, err := ParseConfig([]byte(tc.conf))
		if Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got code %d %v, want %d mentioning %q", tc.conf, Code(err), err, tc.code, tc.msg)
		}
	}
	c, err := ParseConfig([]byte(`{"cniVersion":"1.1.0","name":"n","type":"nodenet","cni.dev/attachments":[{"containerID":"a","ifname":"eth0"}]}`))
	if err != nil || c.Bridge != "cni0" || c.SubnetFile != "/run/flannel/subnet.env" || c.DataDir != "/var/lib/cni/networks" || len(c.ValidAttachments) != 1 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	f, err := ParseConfig([]byte(`{"cniVersion":"0.3.1","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true}}`))
	if err != nil || f.DataDir != "/var/lib/cni/flannel" {
		t.Fatalf("flannel defaults: %+v %v", f, err)
	}
}

func TestRequestedIPs(t *testing.T) {
	c, _ := ParseConfig([]byte(`{"cniVersion":"1.0.0","name":"n","type":"nodenet","args":{"cni":{"ips":["10.0.0.2/24","fd00::2"]}},"runtimeConfig":{"ips":["10.0.0.2"]}}`))
	ips, err := requestedIPs(c, "IgnoreUnknown=1;K8S_POD_NAME=p;IP=10.0.0.9,fd00::9")
	if err != nil || fmt.Sprint(ips) != "[10.0.0.9 fd00::9 10.0.0.2 fd00::2]" {
		t.Fatalf("got %v %v", ips, err)
	}
	for _, bad := range []string{"IP=x", "IP=fe80::1%eth0", "novalue"} {
		if _, err := requestedIPs(c, bad); Code(err) != CodeBadEnv {
			t.Errorf("CNI_ARGS %q: %v", bad, err)
		}
	}
	c.RuntimeConfig = map[string]any{"ips": "10.0.0.1"}
	if _, err := requestedIPs(c, ""); Code(err) != CodeInvalidConfig {
		t.Errorf("runtimeConfig.ips as a string: %v", err)
	}
}

func TestErrorsWire(t *testing.T) {
	err := fmt.Errorf("add: %w", errorf(CodeTryAgainLater, "subnet file missing"))
	if te := AsTypesError(err); te.Code != 11 || te.Msg != "add: subnet file missing" {
		t.Fatalf("%+v", te)
	}
	if te := AsTypesError(errors.New("boom")); te.Code != 999 {
		t.Fatalf("%+v", te)
	}
	delegate := fmt.Errorf("delegate ptp ADD: %w", types.NewError(7, "bad", ""))
	if te := AsTypesError(delegate); te.Code != 7 {
		t.Fatalf("delegate error code %+v", te)
	}
}

func TestHostVethNameAndAlias(t *testing.T) {
	a, b := HostVethName("c1", "eth0"), HostVethName("c1", "eth1")
	if a == b || len(a) != 12 || !strings.HasPrefix(a, "veth") || a != HostVethName("c1", "eth0") {
		t.Fatalf("names %s %s", a, b)
	}
	nw, att, ok := parseAlias(vethAlias("cbr0", "c1", "eth0"))
	if !ok || nw != "cbr0" || att.ContainerID != "c1" || att.IfName != "eth0" {
		t.Fatalf("alias round trip: %s %+v %v", nw, att, ok)
	}
	for _, bad := range []string{"", "nodenet:x", "other:a:b:c"} {
		if _, _, ok := parseAlias(bad); ok {
			t.Errorf("parsed %q", bad)
		}
	}
}

func TestConflictingAddrs(t *testing.T) {
	gw := []netip.Prefix{netip.MustParsePrefix("10.244.1.1/24"), netip.MustParsePrefix("fd00:1::1/64")}
	mk := func(ss ...string) (out []netlink.Addr) {
		for _, s := range ss {
			out = append(out, mustAddr(t, s))
		}
		return out
	}
	c, missing := conflictingAddrs(mk("10.244.1.1/24", "fe80::1/64", "fd00:2::1/64"), gw)
	if len(c) != 0 || len(missing) != 1 || missing[0] != gw[1] {
		t.Fatalf("conflicts %v missing %v", c, missing)
	}
	c, _ = conflictingAddrs(mk("10.244.2.1/24", "fd00:1::5/64"), gw)
	if len(c) != 2 {
		t.Fatalf("conflicts %v", c)
	}
}

func TestChainOffsetsInterfaces(t *testing.T) {
	prev := &current.Result{CNIVersion: "1.0.0", Interfaces: []*current.Interface{{Name: "x"}}, DNS: types.DNS{Nameservers: []string{"1.1.1.1"}}}
	ours := &current.Result{CNIVersion: "1.1.0", Interfaces: []*current.Interface{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		IPs: []*current.IPConfig{{Interface: current.Int(2)}}}
	got, err := chain(prev, ours)
	if err != nil || len(got.Interfaces) != 4 || *got.IPs[0].Interface != 3 || got.DNS.Nameservers[0] != "1.1.1.1" {
		t.Fatalf("%+v %v", got, err)
	}
}

func mustAddr(t *testing.T, s string) netlink.Addr {
	t.Helper()
	a, err := netlink.ParseAddr(s)
	if err != nil {
		t.Fatal(err)
	}
	return *a
}

func TestValidateArgs(t *testing.T) {
	for _, a := range []skel.CmdArgs{
		{ContainerID: "../../etc", IfName: "eth0"},
		{ContainerID: "", IfName: "eth0"},
		{ContainerID: "ok", IfName: "a:b"},
		{ContainerID: "ok", IfName: "far-too-long-name"},
	} {
		if err := validateArgs(&a); Code(err) != CodeBadEnv {
			t.Errorf("%+v: %v", a, err)
		}
	}
	if err := validateArgs(&skel.CmdArgs{ContainerID: "abc-1.2_3", IfName: "eth0"}); err != nil {
		t.Error(err)
	}
}
