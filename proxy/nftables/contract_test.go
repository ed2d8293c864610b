package nftables

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// contractStep is one thing done to both the Fake and the kernel.
type contractStep struct {
	name     string
	script   string                           // raw nft input, or
	elements []Op                             // an element batch, or
	sync     func(p *Proxier, r Runner) error // a data-plane action
	wantErr  string                           // errno message the step must fail with
}

// listing is what both sides are compared on: `nft list table` of our
// table, normalized (objects and elements sorted), "" when it is absent.
func listing(t *testing.T, r Runner, fam proxy.Family) string {
	t.Helper()
	out, err := r.List(context.Background(), "list", "table", famName(fam), TableName)
	if IsNotFound(err) {
		return ""
	}
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	return normalized(string(out))
}

func contractSteps(fam proxy.Family) []contractStep {
	svcs := proxytest.GoldenServices(fam)
	sync := func(cs proxy.ChangeSet, ports ...*proxy.ServicePort) func(*Proxier, Runner) error {
		return func(p *Proxier, _ Runner) error {
			_, err := p.Sync(context.Background(), proxytest.Snapshot(fam, ports...), cs)
			return err
		}
	}
	web2 := *svcs[0]
	web2.Endpoints = web2.Endpoints[:1]
	webNew := *svcs[0]
	webNew.Endpoints = append([]proxy.Endpoint{webNew.Endpoints[0]}, webNew.Endpoints[0])
	webNew.Endpoints[1].IP = netip.MustParseAddr(map[bool]string{true: "fd10::9:9", false: "10.244.9.9"}[fam == proxy.IPv6])
	w := writer{family: fam}
	hairpin, _ := w.layout(setHairpin)
	sticky2 := *svcs[5]
	sticky2.AffinityTimeout = time.Minute
	T := famName(fam) + " " + TableName
	key := "10.96.99.1 . tcp . 80"
	if fam == proxy.IPv6 {
		key = "fd00::99:1 . tcp . 80"
	}
	return []contractStep{
		{name: "full sync", sync: sync(proxytest.Full, svcs...)},
		{name: "partial: endpoint replaced (element path)", sync: sync(proxytest.Changed(webNew.Name), append([]*proxy.ServicePort{&webNew}, svcs[1:]...)...)},
		{name: "element path: deleting a missing element", elements: []Op{{Kind: OpDeleteElement, Set: setHairpin, Layout: hairpin, Key: key4or6(fam, "192.0.2.99") + " . " + key4or6(fam, "192.0.2.99")}}, wantErr: msgNoEnt},
		{name: "element path: adding to a missing set", elements: []Op{{Set: "nope", Layout: hairpin, Key: key4or6(fam, "192.0.2.99") + " . " + key4or6(fam, "192.0.2.99")}}, wantErr: msgNoEnt},
		{name: "element path: one bad element aborts the batch", elements: []Op{
			{Set: setHairpin, Layout: hairpin, Key: key4or6(fam, "192.0.2.98") + " . " + key4or6(fam, "192.0.2.98")},
			{Kind: OpDeleteElement, Set: setHairpin, Layout: hairpin, Key: key4or6(fam, "192.0.2.99") + " . " + key4or6(fam, "192.0.2.99")}}, wantErr: msgNoEnt},
		{name: "partial: endpoint removed", sync: sync(proxytest.Changed(web2.Name), append([]*proxy.ServicePort{&web2}, svcs[1:]...)...)},
		{name: "partial: services deleted", sync: sync(proxytest.Changed(svcs[2].Name, svcs[3].Name), append([]*proxy.ServicePort{&web2}, svcs[4:]...)...)},
		{name: "partial: services back, affinity timeout changed", sync: sync(proxytest.Changed(svcs[0].Name, svcs[2].Name, svcs[3].Name, sticky2.Name),
			append(append([]*proxy.ServicePort{}, svcs[:5]...), append([]*proxy.ServicePort{&sticky2}, svcs[6:]...)...)...)},
		{name: "full sync converges", sync: sync(proxytest.Full, svcs...)},
		{name: "full sync again", sync: sync(proxytest.Full, svcs...)},
		{name: "someone else's map and set in our table", script: "add map " + T + " stale-map { type inet_service : verdict ; }\nadd set " + T + " stale-set { type inet_service ; }\n"},
		{name: "full sync deletes them", sync: sync(proxytest.Full, svcs...)},
		{name: "jump to a missing chain", script: "add chain " + T + " t1\nadd rule " + T + " t1 jump nope\n", wantErr: msgNoEnt},
		{name: "element naming a missing chain", script: "add element " + T + " service-ips { " + key + " : goto nope }\n", wantErr: msgNoEnt},
		{name: "deleting a missing element", script: "delete element " + T + " service-ips { " + key + " }\n", wantErr: msgNoEnt},
		{name: "deleting a referenced chain", script: "delete chain " + T + " reject-chain\n", wantErr: msgBusy},
		{name: "element mapped to another verdict", script: "add element " + T + " service-ips { " + key + " : drop }\nadd element " + T + " service-ips { " + key + " : accept }\n", wantErr: msgExist},
		{name: "jump loop", script: "add chain " + T + " l1\nadd chain " + T + " l2\nadd rule " + T + " l1 jump l2\nadd rule " + T + " l2 jump l1\nadd element " + T + " service-ips { " + key + " : goto l1 }\n", wantErr: msgTooMany},
		{name: "DNAT reachable from a filter hook", script: "add chain " + T + " d1\nadd rule " + T + " d1 meta l4proto tcp dnat to " + map[bool]string{true: "[fd00::1]", false: "10.0.0.1"}[fam == proxy.IPv6] + ":80\nadd rule " + T + " service-endpoints-check jump d1\n", wantErr: msgNotSupp},
		{name: "cleanup", sync: func(p *Proxier, _ Runner) error { return p.Cleanup(context.Background()) }},
		{name: "cleanup twice", sync: func(p *Proxier, _ Runner) error { return p.Cleanup(context.Background()) }},
		{name: "full sync after cleanup", sync: sync(proxytest.Full, svcs...)},
		{name: "partial: everything deleted", sync: sync(proxytest.Changed(svcs[0].Name, svcs[1].Name, svcs[2].Name, svcs[3].Name, svcs[4].Name, svcs[5].Name, svcs[6].Name, svcs[7].Name, svcs[8].Name))},
	}
}

// key4or6 maps an IPv4 test address into the family.
func key4or6(fam proxy.Family, v4 string) string {
	if fam == proxy.IPv6 {
		return "2001:db8::" + strings.ReplaceAll(strings.TrimPrefix(v4, "192.0.2."), ".", ":")
	}
	return v4
}

// runContract applies the steps to r and returns the listing after each.
func runContract(t *testing.T, fam proxy.Family, r Runner) []string {
	t.Helper()
	p := New(fam, r, nil)
	var states []string
	for _, st := range contractSteps(fam) {
		var err error
		switch {
		case st.sync != nil:
			err = st.sync(p, r)
		case st.elements != nil:
			err = r.Batch(context.Background(), famName(fam), TableName, st.elements)
		default:
			err = r.Apply(context.Background(), []byte(st.script))
		}
		switch {
		case st.wantErr == "" && err != nil:
			t.Fatalf("%s: %v", st.name, err)
		case st.wantErr != "" && !hasMsg(err, st.wantErr):
			t.Fatalf("%s: err = %v, want %q", st.name, err, st.wantErr)
		}
		states = append(states, listing(t, r, fam))
	}
	return states
}

func TestContractFake(t *testing.T) {
	for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		t.Run(fam.String(), func(t *testing.T) { runContract(t, fam, NewFake()) })
	}
}

// TestContractKernel runs the same steps against nft in a throwaway
// namespace and requires the kernel's listing to equal the Fake's after
// every step (and the same errors).
func TestContractKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		t.Run(fam.String(), func(t *testing.T) {
			ns := nettest.New(t)
			r := &ExecRunner{Netns: ns.Name()}
			t.Cleanup(func() { r.Close() })
			kernel := runContract(t, fam, r)
			fake := runContract(t, fam, NewFake())
			if !strings.Contains(kernel[0], "dnat to") || !strings.Contains(kernel[0], "goto reject-chain") {
				t.Fatalf("kernel listing after the first sync looks empty:\n%s", kernel[0])
			}
			for i, st := range contractSteps(fam) {
				if kernel[i] != fake[i] {
					t.Errorf("after %q the kernel and the Fake differ:\n%s", st.name, lineDiff(kernel[i], fake[i]))
					return
				}
			}
		})
	}
}
