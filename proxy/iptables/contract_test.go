package iptables

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// contractStep is one thing done to both the Fake and the kernel.
type contractStep struct {
	name    string
	restore string                               // raw iptables-restore input, or
	sync    func(p *Proxier, r ipt.Runner) error // a data-plane action
	wantErr bool
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// normalizedSave is what both sides are compared on: iptables-save of nat
// and filter without comments/counters.
func normalizedSave(t *testing.T, r ipt.Runner) string {
	t.Helper()
	var sb strings.Builder
	for _, table := range []string{"filter", "nat"} {
		out, err := r.Save(context.Background(), table)
		if err != nil {
			t.Fatalf("save %s: %v", table, err)
		}
		for _, l := range strings.Split(string(out), "\n") {
			if l == "" || strings.HasPrefix(l, "#") {
				continue
			}
			sb.WriteString(counters.ReplaceAllString(l, "[0:0]"))
			sb.WriteByte('\n')
		}
	}
	return sb.String()
}

func contractSteps(fam proxy.Family) []contractStep {
	svcs := proxytest.GoldenServices(fam)
	sync := func(cs proxy.ChangeSet, ports ...*proxy.ServicePort) func(*Proxier, ipt.Runner) error {
		return func(p *Proxier, _ ipt.Runner) error {
			_, err := p.Sync(context.Background(), proxytest.Snapshot(fam, ports...), cs)
			return err
		}
	}
	web2 := *svcs[0]
	web2.Endpoints = web2.Endpoints[:1]
	return []contractStep{
		{name: "full sync", sync: sync(proxytest.Full, svcs...)},
		{name: "partial: endpoint removed", sync: sync(proxytest.Changed(web2.Name), append([]*proxy.ServicePort{&web2}, svcs[1:]...)...)},
		{name: "partial: services deleted", sync: sync(proxytest.Changed(svcs[2].Name, svcs[3].Name), append([]*proxy.ServicePort{&web2}, svcs[4:]...)...)},
		{name: "partial: services back", sync: sync(proxytest.Changed(svcs[0].Name, svcs[2].Name, svcs[3].Name), svcs...)},
		{name: "full sync again is a no-op", sync: sync(proxytest.Full, svcs...)},
		{name: "jump to a missing chain", restore: "*nat\n:NODENET-T1 - [0:0]\n-A NODENET-T1 -j NODENET-NOPE\nCOMMIT\n", wantErr: true},
		{name: "rule in a missing chain", restore: "*nat\n-A NODENET-NOPE -j ACCEPT\nCOMMIT\n", wantErr: true},
		{name: "delete a missing rule", restore: "*nat\n-D NODENET-SERVICES -p tcp -j ACCEPT\nCOMMIT\n", wantErr: true},
		{name: "delete a referenced chain", restore: "*nat\n:NODENET-MARK-MASQ - [0:0]\n-X NODENET-MARK-MASQ\nCOMMIT\n", wantErr: true},
		{name: "MASQUERADE reachable from PREROUTING", restore: "*nat\n-A NODENET-MARK-MASQ -j MASQUERADE\nCOMMIT\n", wantErr: true},
		{name: "chain name over 28 characters", restore: "*nat\n:NODENET-SVC-ABCDEFGHIJKLMNOPQ - [0:0]\nCOMMIT\n", wantErr: true},
		{name: "port without protocol", restore: "*nat\n-A NODENET-SERVICES --dport 80 -j ACCEPT\nCOMMIT\n", wantErr: true},
		{name: "unknown protocol", restore: "*nat\n-A NODENET-SERVICES -p bogus -j ACCEPT\nCOMMIT\n", wantErr: true},
		{name: "others' chains", restore: "*nat\n:KUBE-SERVICES - [0:0]\n-A PREROUTING -j KUBE-SERVICES\nCOMMIT\n"},
		{name: "cleanup", sync: func(p *Proxier, _ ipt.Runner) error { return p.Cleanup(context.Background()) }},
		{name: "cleanup twice", sync: func(p *Proxier, _ ipt.Runner) error { return p.Cleanup(context.Background()) }},
	}
}

// runContract applies the steps to r and returns the state after each.
func runContract(t *testing.T, fam proxy.Family, r ipt.Runner) []string {
	t.Helper()
	p := New(fam, r, nil)
	var states []string
	for _, st := range contractSteps(fam) {
		var err error
		if st.sync != nil {
			err = st.sync(p, r)
		} else {
			err = r.Restore(context.Background(), []byte(st.restore))
		}
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: err = %v, want error: %v", st.name, err, st.wantErr)
		}
		states = append(states, normalizedSave(t, r))
	}
	return states
}

func TestContractFake(t *testing.T) {
	for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
		t.Run(fam.String(), func(t *testing.T) { runContract(t, fam, ipt.NewFake()) })
	}
}

// TestContractKernel runs the same steps against iptables-nft and
// iptables-legacy in a throwaway namespace and requires the kernel's state to
// equal the Fake's after every step. It needs both backends' binaries: the
// gate skips without them, and fails under NODENET_PRIVILEGED=1.
func TestContractKernel(t *testing.T) {
	nettest.RequirePrivileged(t)
	for _, b := range []ipt.Backend{ipt.NFT, ipt.Legacy} {
		for _, fam := range []proxy.Family{proxy.IPv4, proxy.IPv6} {
			t.Run(string(b)+"/"+fam.String(), func(t *testing.T) {
				tool := "iptables-" + string(b)
				if fam == proxy.IPv6 {
					tool = "ip6tables-" + string(b)
				}
				for _, suffix := range []string{"-save", "-restore"} {
					nettest.RequireTool(t, tool+suffix)
				}
				r := kernelRunner(nettest.New(t), fam, b)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				if _, err := r.Save(ctx, "nat"); err != nil {
					t.Fatalf("%s cannot read the nat table: %v", r, err)
				}
				kernel := runContract(t, fam, r)
				fake := runContract(t, fam, ipt.NewFake())
				for i, st := range contractSteps(fam) {
					if kernel[i] != fake[i] {
						t.Errorf("after %q the kernel and the Fake differ:\nkernel:\n%s\nfake:\n%s", st.name, kernel[i], fake[i])
						return
					}
				}
			})
		}
	}
}
