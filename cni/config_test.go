package cni

import (
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"strings"
	"testing"

	"github.com/nodenet/nodenet/cni/protocol"
)

func TestParseConfigCodes(t *testing.T) {
	for _, tc := range []struct {
		conf string
		code uint
		msg  string
	}{
		{`{`, protocol.CodeDecode, "decode"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","mtu":"big"}`, protocol.CodeDecode, "mtu"},
		{`{"name":"n","type":"nodenet"}`, protocol.CodeInvalidConfig, "cniVersion"},
		{`{"cniVersion":"0.2.0","name":"n","type":"nodenet"}`, protocol.CodeIncompatibleVersion, "0.2.0"},
		{`{"cniVersion":"1.0.0","type":"nodenet"}`, protocol.CodeInvalidConfig, "name"},
		{`{"cniVersion":"1.0.0","name":"a/b","type":"nodenet"}`, protocol.CodeInvalidConfig, "a/b"},
		{`{"cniVersion":"1.0.0","name":"n","type":"macvlan"}`, protocol.CodeInvalidConfig, "macvlan"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","bridge":"a b"}`, protocol.CodeInvalidConfig, "bridge"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","mtu":70000}`, protocol.CodeInvalidConfig, "mtu"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","ranges":[[{"subnet":"10.0.0.0/24"},{"subnet":"10.0.0.128/25"}]]}`, protocol.CodeInvalidConfig, "overlap"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","ranges":[[{"subnet":"nope"}]]}`, protocol.CodeDecode, "nope"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","delegate":{}}`, protocol.CodeInvalidConfig, "delegate"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","ipam":{"type":"host-local"}}`, protocol.CodeInvalidConfig, "use ranges instead of ipam"},
		{`{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"type":7}}`, protocol.CodeInvalidConfig, "delegate.type"},
		{`{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"name":"x"}}`, protocol.CodeInvalidConfig, "name"},
		{`{"cniVersion":"1.0.0","name":"n","type":"nodenet","prevResult":{"ips":[{"address":"banana"}]}}`, protocol.CodeDecode, "prevResult"},
	} {
		_, err := ParseConfig([]byte(tc.conf))
		if protocol.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got code %d %v, want %d mentioning %q", tc.conf, protocol.Code(err), err, tc.code, tc.msg)
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
		if _, err := requestedIPs(c, bad); protocol.Code(err) != protocol.CodeBadEnv {
			t.Errorf("CNI_ARGS %q: %v", bad, err)
		}
	}
	c.RuntimeConfig = map[string]any{"ips": "10.0.0.1"}
	if _, err := requestedIPs(c, ""); protocol.Code(err) != protocol.CodeInvalidConfig {
		t.Errorf("runtimeConfig.ips as a string: %v", err)
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
	mk := func(ss ...string) (out []netip.Prefix) {
		for _, s := range ss {
			out = append(out, netip.MustParsePrefix(s))
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

// TestLazyAttrs: the attributes reach records that get through, and are
// not formatted for those that do not.
func TestLazyAttrs(t *testing.T) {
	var buf strings.Builder
	base := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	l := withLazyAttrs(base, slog.String("container", "c1"))
	l.Info("hidden")
	if h := l.Handler().(*lazyAttrs); h.with != nil || buf.Len() != 0 {
		t.Fatalf("attributes formatted for a record below the level: %q", buf.String())
	}
	l.With("k", "v").Warn("shown")
	if out := buf.String(); !strings.Contains(out, "container=c1") || !strings.Contains(out, "k=v") || !strings.Contains(out, "msg=shown") {
		t.Fatalf("log line %q", out)
	}
}

// TestMainDecodesAsPlugin: the dispatcher decodes the configuration as the
// plugin does, so a plugin key of the wrong type is a decoding error (code
// 6) before anything else is checked — here an unsupported version.
func TestMainDecodesAsPlugin(t *testing.T) {
	env := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent/netns", "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
	var out strings.Builder
	code := protocol.Main(t.Context(), &Plugin{}, func(k string) string { return env[k] },
		strings.NewReader(`{"cniVersion":"0.2.0","name":"n","type":"nodenet","mtu":"big"}`), &out, io.Discard, "")
	if code != 1 || !strings.Contains(out.String(), `"code":6`) || !strings.Contains(out.String(), "NetConf.mtu") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}
