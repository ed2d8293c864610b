package protocol

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// fakePlugin records the commands Main runs.
type fakePlugin struct {
	ran  []string
	args *CmdArgs
	err  error
}

func (f *fakePlugin) DecodeConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, err
	}
	return &c, nil
}

func (f *fakePlugin) record(cmd string, args *CmdArgs) error {
	f.ran, f.args = append(f.ran, cmd), args
	return f.err
}

func (f *fakePlugin) Add(_ context.Context, args *CmdArgs) (*Result, error) {
	if err := f.record("ADD", args); err != nil {
		return nil, err
	}
	return &Result{CNIVersion: "1.0.0", Interfaces: []*Interface{{Name: "eth0"}}}, nil
}
func (f *fakePlugin) Check(_ context.Context, a *CmdArgs) error  { return f.record("CHECK", a) }
func (f *fakePlugin) Del(_ context.Context, a *CmdArgs) error    { return f.record("DEL", a) }
func (f *fakePlugin) GC(_ context.Context, a *CmdArgs) error     { return f.record("GC", a) }
func (f *fakePlugin) Status(_ context.Context, a *CmdArgs) error { return f.record("STATUS", a) }

// run drives Main as the binary does, with env as the environment.
func run(t *testing.T, p Plugin, env map[string]string, stdin string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = Main(context.Background(), p, func(k string) string { return env[k] }, strings.NewReader(stdin), &out, &errb, "about nodenet")
	return code, out.String(), errb.String()
}

func TestMainWithoutCommand(t *testing.T) {
	code, out, errOut := run(t, &fakePlugin{}, nil, "")
	if code != 0 || out != "" || !strings.Contains(errOut, "about nodenet") || !strings.Contains(errOut, "0.3.1, 0.4.0, 1.0.0, 1.1.0") {
		t.Fatalf("exit %d stdout %q stderr %q", code, out, errOut)
	}
}

// TestMainVersion: VERSION's answer is what the reference library's
// decoder expects, whatever stdin holds.
func TestMainVersion(t *testing.T) {
	code, out, _ := run(t, &fakePlugin{}, map[string]string{"CNI_COMMAND": "VERSION"}, "not json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	info, err := (&version.PluginDecoder{}).Decode([]byte(out))
	if err != nil || !reflect.DeepEqual(info.SupportedVersions(), []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"}) {
		t.Fatalf("VERSION printed %s: %v", out, err)
	}
	var v struct{ CNIVersion string }
	if json.Unmarshal([]byte(out), &v); v.CNIVersion != "1.1.0" {
		t.Fatalf("VERSION cniVersion %q", v.CNIVersion)
	}
}

// TestMainErrors: what the dispatcher refuses before any command runs,
// with the spec's codes, as error objects the reference library reads;
// the plugin is not called.
func TestMainErrors(t *testing.T) {
	full := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "c1", "CNI_NETNS": "/proc/self/ns/net", "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin"}
	with := func(kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range full {
			m[k] = v
		}
		for i := 0; i < len(kv); i += 2 {
			if kv[i+1] == "" {
				delete(m, kv[i])
			} else {
				m[kv[i]] = kv[i+1]
			}
		}
		return m
	}
	conf := func(v string) string { return `{"cniVersion":"` + v + `","name":"cbr0","type":"nodenet"}` }
	for _, tc := range []struct {
		name  string
		env   map[string]string
		stdin string
		code  uint
		msg   string
	}{
		{"missing variables", map[string]string{"CNI_COMMAND": "ADD"}, conf("1.0.0"), 4, "[CNI_CONTAINERID,CNI_NETNS,CNI_IFNAME,CNI_PATH] missing"},
		{"DEL needs no netns", with("CNI_COMMAND", "DEL", "CNI_NETNS", "", "CNI_PATH", ""), conf("1.0.0"), 4, "[CNI_PATH] missing"},
		{"bad container id", with("CNI_CONTAINERID", "../x"), conf("1.0.0"), 4, "containerID"},
		{"bad ifname", with("CNI_IFNAME", "a:b"), conf("1.0.0"), 4, "CNI_IFNAME"},
		{"long ifname", with("CNI_IFNAME", "abcdefghijklmnop"), conf("1.0.0"), 4, "too long"},
		{"unknown command", with("CNI_COMMAND", "FROB"), conf("1.0.0"), 4, "unknown CNI_COMMAND: FROB"},
		{"bad JSON", full, `{"cniVersion":`, 6, "network config"},
		{"missing name", full, `{"cniVersion":"1.0.0"}`, 7, "network name"},
		{"bad name", full, `{"cniVersion":"1.0.0","name":"a b"}`, 7, "a b"},
		{"old version", full, conf("0.2.0"), 1, "incompatible"},
		{"no version", full, `{"name":"cbr0"}`, 1, "0.1.0"},
		{"CHECK before 0.4.0", with("CNI_COMMAND", "CHECK"), conf("0.3.1"), 1, "CHECK"},
		{"GC before 1.1.0", map[string]string{"CNI_COMMAND": "GC", "CNI_PATH": "/x"}, conf("1.0.0"), 1, "GC"},
		{"STATUS before 1.1.0", map[string]string{"CNI_COMMAND": "STATUS", "CNI_PATH": "/x"}, conf("1.0.0"), 1, "STATUS"},
		{"own namespace", full, conf("1.0.0"), 8, "should not be the same"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &fakePlugin{}
			code, out, _ := run(t, p, tc.env, tc.stdin)
			var te types.Error
			if err := json.Unmarshal([]byte(out), &te); err != nil || code != 1 {
				t.Fatalf("exit %d, stdout %q (%v)", code, out, err)
			}
			if te.Code != tc.code || !strings.Contains(te.Msg+te.Details, tc.msg) {
				t.Fatalf("got %+v, want code %d mentioning %q", te, tc.code, tc.msg)
			}
			if len(p.ran) != 0 {
				t.Fatalf("the plugin ran %v", p.ran)
			}
		})
	}
}

// TestMainRuns: each command reaches its method with the variables and
// stdin; ADD's result goes to stdout in its version's shape, the others
// print nothing; the plugin's failure is an error object with its code.
func TestMainRuns(t *testing.T) {
	env := map[string]string{"CNI_CONTAINERID": "c1", "CNI_NETNS": "/nonexistent/netns", "CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin", "CNI_ARGS": "IP=10.0.0.2"}
	conf := `{"cniVersion":"1.1.0","name":"cbr0","type":"x"}`
	for _, cmd := range []string{"ADD", "CHECK", "DEL", "GC", "STATUS"} {
		p := &fakePlugin{}
		env["CNI_COMMAND"] = cmd
		code, out, _ := run(t, p, env, conf)
		if code != 0 || len(p.ran) != 1 || p.ran[0] != cmd || string(p.args.StdinData) != conf || p.args.Args != "IP=10.0.0.2" || p.args.IfName != "eth0" {
			t.Fatalf("%s: exit %d, ran %v with %+v", cmd, code, p.ran, p.args)
		}
		if want := map[string]string{"ADD": `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}]}`}[cmd]; out != want {
			t.Errorf("%s printed %q, want %q", cmd, out, want)
		}
	}
	p := &fakePlugin{err: Errorf(CodeTryAgainLater, "not yet")}
	env["CNI_COMMAND"] = "DEL"
	if code, out, _ := run(t, p, env, conf); code != 1 || out != `{"code":11,"msg":"not yet"}` {
		t.Fatalf("failing DEL: exit %d, %s", code, out)
	}
}

func TestNetnsOverride(t *testing.T) {
	a := &CmdArgs{Netns: "/proc/self/ns/net"}
	if Code(checkNotOwnNetNS(a)) != CodeInvalidNetNS || !sameNetNS("/proc/thread-self/ns/net") || sameNetNS("/nonexistent") {
		t.Fatal("own namespace accepted")
	}
	for _, o := range []string{"1", "true", "TRUE"} {
		a.NetnsOverride = o
		if err := checkNotOwnNetNS(a); err != nil {
			t.Errorf("CNI_NETNS_OVERRIDE=%s: %v", o, err)
		}
	}
}

// TestResultJSONMatchesLibrary: our hand-written result JSON, read by the
// reference library in each version and written back by it, says the
// same; the shape differences between versions are checkShape's.
func TestResultJSONMatchesLibrary(t *testing.T) {
	two, table, scope := 2, 100, 253
	for _, v := range SupportedVersions {
		r := &Result{
			CNIVersion: v,
			Interfaces: []*Interface{{Name: "cni0", Mac: "0a:58:0a:f4:01:01", Mtu: 1450}, {Name: "eth0", Sandbox: "/run/netns/a \"b\"\x01é"}},
			IPs: []*IPConfig{{Interface: &two, Address: netip.MustParsePrefix("10.244.1.5/24"), Gateway: netip.MustParseAddr("10.244.1.1")},
				{Address: netip.MustParsePrefix("fd00::5/64")}},
			Routes: []*Route{{Dst: netip.MustParsePrefix("0.0.0.0/0"), GW: netip.MustParseAddr("10.244.1.1")},
				{Dst: netip.MustParsePrefix("10.0.0.0/8"), MTU: 1400, AdvMSS: 1360, Priority: 5, Table: &table, Scope: &scope}},
			DNS: DNS{Nameservers: []string{"10.96.0.10"}, Domain: "cluster.local", Search: []string{"svc"}, Options: []string{"ndots:5"}},
		}
		ours, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		lib, err := version.NewResult(v, ours)
		if err != nil {
			t.Fatalf("%s: library rejects %s: %v", v, ours, err)
		}
		theirs, err := json.Marshal(lib)
		if err != nil {
			t.Fatal(err)
		}
		var a, b any
		json.Unmarshal(ours, &a)
		json.Unmarshal(theirs, &b)
		if v != "1.1.0" {
			// The library keeps interface mtu in 1.0.0 (same Go type);
			// the spec has it from 1.1.0 on, and so do we.
			delete(b.(map[string]any)["interfaces"].([]any)[0].(map[string]any), "mtu")
		}
		if !reflect.DeepEqual(a, b) {
			t.Errorf("%s:\n ours   %s\n theirs %s", v, ours, theirs)
		}
		var back Result
		if err := json.Unmarshal(ours, &back); err != nil || back.IPs[0].Address != r.IPs[0].Address || back.Routes[1].Table == nil || back.DNS.Domain != "cluster.local" {
			t.Errorf("%s: reading our own result back: %+v %v", v, back, err)
		}
	}
	empty, _ := json.Marshal(&Result{CNIVersion: "1.0.0"})
	if string(empty) != `{"cniVersion":"1.0.0"}` {
		t.Errorf("empty result %s", empty)
	}
}

func TestErrorsWire(t *testing.T) {
	err := fmt.Errorf("add: %w", Errorf(CodeTryAgainLater, "subnet file missing"))
	if te := AsWireError(err); te.Code != 11 || te.Msg != "add: subnet file missing" {
		t.Fatalf("%+v", te)
	}
	if te := AsWireError(errors.New("boom")); te.Code != 999 {
		t.Fatalf("%+v", te)
	}
	delegate := fmt.Errorf("delegate ptp ADD: %w", &WireError{Code: 7, Msg: "bad"})
	if te := AsWireError(delegate); te.Code != 7 {
		t.Fatalf("delegate error code %+v", te)
	}
	if WithCode(CodeIO, err) != err || Code(WithCode(CodeIO, errors.New("x"))) != CodeIO || WithCode(CodeIO, nil) != nil {
		t.Fatal("WithCode")
	}
}

func TestChainOffsetsInterfaces(t *testing.T) {
	two := 2
	prev := &Result{CNIVersion: "1.0.0", Interfaces: []*Interface{{Name: "x"}}, DNS: DNS{Nameservers: []string{"1.1.1.1"}}}
	ours := &Result{CNIVersion: "1.1.0", Interfaces: []*Interface{{Name: "a"}, {Name: "b"}, {Name: "c"}},
		IPs: []*IPConfig{{Interface: &two}}}
	got := Chain(prev, ours)
	if len(got.Interfaces) != 4 || *got.IPs[0].Interface != 3 || got.DNS.Nameservers[0] != "1.1.1.1" || got.CNIVersion != "1.1.0" || *ours.IPs[0].Interface != 2 {
		t.Fatalf("%+v", got)
	}
	if Chain(nil, ours) != ours {
		t.Fatal("no prevResult")
	}
}

func TestValidateArgs(t *testing.T) {
	for _, a := range []CmdArgs{
		{ContainerID: "../../etc", IfName: "eth0"},
		{ContainerID: "", IfName: "eth0"},
		{ContainerID: "ok", IfName: "a:b"},
		{ContainerID: "ok", IfName: "far-too-long-name"},
	} {
		if err := ValidateArgs(&a); Code(err) != CodeBadEnv {
			t.Errorf("%+v: %v", a, err)
		}
	}
	if err := ValidateArgs(&CmdArgs{ContainerID: "abc-1.2_3", IfName: "eth0"}); err != nil {
		t.Error(err)
	}
}

func TestVersionAtLeast(t *testing.T) {
	for _, tc := range []struct {
		v, min string
		want   bool
	}{
		{"1.1.0", "1.1.0", true}, {"0.10.0", "0.4.0", true}, {"0.3.1", "0.4.0", false},
		{"1.0", "0.4.0", true}, {"x", "0.1.0", false}, {"1.0.0.0", "0.1.0", false},
	} {
		if got := VersionAtLeast(tc.v, tc.min); got != tc.want {
			t.Errorf("VersionAtLeast(%q, %q) = %v", tc.v, tc.min, got)
		}
	}
}
