package iptables

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/nodenet/nodenet/internal/nettest"
)

// contractStep is one restore applied to both the Fake and a kernel.
type contractStep struct {
	name    string
	restore string // iptables-restore input; {NET}, {SUB} and {MC} are the family's
	wantErr bool
}

// contractSteps covers what the users of this package write: flanneld's
// masquerade and forward chains, the CNI plugin's chain, flushing by
// re-declaring, inserting at a position, deleting rules and chains, and
// the inputs the kernel refuses.
var contractSteps = []contractStep{
	{name: "masquerade and forward chains", restore: `*nat
:NODENET-T-MASQ - [0:0]
-A NODENET-T-MASQ -m mark --mark 0x4000/0x4000 -m comment --comment "t masq" -j RETURN
-A NODENET-T-MASQ -s {SUB} -d {NET} -m comment --comment "t masq" -j RETURN
-A NODENET-T-MASQ ! -s {NET} -d {SUB} -m comment --comment "t masq" -j RETURN
-A NODENET-T-MASQ -s {NET} ! -d {MC} -m comment --comment "t masq" -j MASQUERADE --random-fully
-I POSTROUTING 1 -m comment --comment "t masq" -j NODENET-T-MASQ
COMMIT
*filter
:NODENET-T-FWD - [0:0]
-A NODENET-T-FWD -s {NET} -m comment --comment "t fwd" -j ACCEPT
-A NODENET-T-FWD -d {NET} -m comment --comment "t fwd" -j ACCEPT
-A FORWARD -m comment --comment "t fwd" -j NODENET-T-FWD
COMMIT
`},
	{name: "CNI chain", restore: `*nat
:NODENET-T-CNI - [0:0]
-A NODENET-T-CNI -d {SUB} -j RETURN
-A NODENET-T-CNI ! -d {MC} -j MASQUERADE
-A POSTROUTING -s {SUB} -m comment --comment "nodenet-cni cbr0" -j NODENET-T-CNI
COMMIT
`},
	{name: "re-declaring flushes", restore: "*nat\n:NODENET-T-MASQ - [0:0]\n-A NODENET-T-MASQ -s {NET} -j MASQUERADE\nCOMMIT\n"},
	{name: "insert at a position", restore: "*nat\n-I POSTROUTING 2 -s {SUB} -j RETURN\n-I NODENET-T-CNI -p tcp -m tcp --dport 53 -j RETURN\nCOMMIT\n"},
	{name: "delete a rule", restore: "*filter\n-D NODENET-T-FWD -d {NET} -m comment --comment \"t fwd\" -j ACCEPT\nCOMMIT\n"},
	{name: "delete a missing rule", restore: "*filter\n-D FORWARD -s {NET} -j DROP\nCOMMIT\n", wantErr: true},
	{name: "rule in a missing chain", restore: "*nat\n-A NODENET-NOPE -j RETURN\nCOMMIT\n", wantErr: true},
	{name: "jump to a missing chain", restore: "*nat\n-A NODENET-T-CNI -j NODENET-NOPE\nCOMMIT\n", wantErr: true},
	{name: "delete a referenced chain", restore: "*nat\n:NODENET-T-CNI - [0:0]\n-X NODENET-T-CNI\nCOMMIT\n", wantErr: true},
	{name: "a failed table changes nothing", restore: "*nat\n-D POSTROUTING -s {SUB} -j RETURN\n-A NODENET-NOPE -j RETURN\nCOMMIT\n", wantErr: true},
	{name: "remove everything", restore: `*nat
-D POSTROUTING -m comment --comment "t masq" -j NODENET-T-MASQ
-D POSTROUTING -s {SUB} -m comment --comment "nodenet-cni cbr0" -j NODENET-T-CNI
-D POSTROUTING -s {SUB} -j RETURN
:NODENET-T-MASQ - [0:0]
:NODENET-T-CNI - [0:0]
-X NODENET-T-MASQ
-X NODENET-T-CNI
COMMIT
*filter
-D FORWARD -m comment --comment "t fwd" -j NODENET-T-FWD
:NODENET-T-FWD - [0:0]
-X NODENET-T-FWD
COMMIT
`},
}

// familyText fills in a family's networks.
func familyText(f Family) *strings.Replacer {
	if f == IPv6 {
		return strings.NewReplacer("{NET}", "fd00:10:244::/56", "{SUB}", "fd00:10:244:3::/64", "{MC}", "ff00::/8")
	}
	return strings.NewReplacer("{NET}", "10.244.0.0/16", "{SUB}", "10.244.3.0/24", "{MC}", "224.0.0.0/4")
}

var counters = regexp.MustCompile(`\[\d+:\d+\]`)

// observe is what both sides are compared on after a step: iptables-save
// of filter and nat without comments or counters, and ListChain of a
// built-in, a user and a missing chain.
func observe(t *testing.T, r Runner) string {
	t.Helper()
	ctx := context.Background()
	var sb strings.Builder
	for _, table := range []string{"filter", "nat"} {
		out, err := r.Save(ctx, table)
		if err != nil {
			t.Fatalf("save %s: %v", table, err)
		}
		for line := range strings.Lines(string(out)) {
			if !strings.HasPrefix(line, "#") {
				sb.WriteString(counters.ReplaceAllString(line, "[0:0]"))
			}
		}
	}
	for _, chain := range []string{"POSTROUTING", "NODENET-T-CNI", "NODENET-NOPE"} {
		rules, ok, err := r.ListChain(ctx, "nat", chain)
		if err != nil {
			t.Fatalf("list %s: %v", chain, err)
		}
		fmt.Fprintf(&sb, "ListChain %s: exists=%v %q\n", chain, ok, rules)
	}
	return sb.String()
}

// kindOf names an error's classification.
func kindOf(err error) string {
	for _, k := range []error{ErrNotExist, ErrLocked, ErrNotInstalled} {
		if errors.Is(err, k) {
			return k.Error()
		}
	}
	return ""
}

type contractResult struct {
	states []string
	kinds  []string
}

func runContract(t *testing.T, f Family, r Runner) contractResult {
	t.Helper()
	var res contractResult
	text := familyText(f)
	for _, st := range contractSteps {
		err := r.Restore(context.Background(), []byte(text.Replace(st.restore)))
		if (err != nil) != st.wantErr {
			t.Fatalf("%s: err = %v, want error: %v", st.name, err, st.wantErr)
		}
		var e *Error
		if err != nil && !errors.As(err, &e) {
			t.Fatalf("%s: %T is not an *Error: %v", st.name, err, err)
		}
		res.states = append(res.states, observe(t, r))
		res.kinds = append(res.kinds, kindOf(err))
	}
	return res
}

func TestContractFake(t *testing.T) {
	for _, f := range []Family{IPv4, IPv6} {
		t.Run(f.String(), func(t *testing.T) { runContract(t, f, NewFake()) })
	}
}

// TestContractKernel runs the steps against iptables-nft and
// iptables-legacy in throwaway namespaces: after every step the saved
// rules and listed chains equal the Fake's, and where the kernel's tool
// says why a restore failed, the Fake's error is classified the same.
func TestContractKernel(t *testing.T) {
	for _, b := range []Backend{NFT, Legacy} {
		for _, f := range []Family{IPv4, IPv6} {
			t.Run(string(b)+"/"+f.String(), func(t *testing.T) {
				requireBackends(t, f)
				ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
				defer cancel()
				r := New(inNS(nettest.New(t)), f, b)
				if _, err := r.Save(ctx, "nat"); err != nil {
					t.Fatalf("%s cannot read the nat table: %v", r, err)
				}
				kernel := runContract(t, f, r)
				fake := runContract(t, f, NewFake())
				for i, st := range contractSteps {
					if kernel.states[i] != fake.states[i] {
						t.Fatalf("after %q the kernel and the Fake differ:\nkernel:\n%s\nfake:\n%s", st.name, kernel.states[i], fake.states[i])
					}
					if kernel.kinds[i] != "" && kernel.kinds[i] != fake.kinds[i] {
						t.Errorf("%q: the kernel's error is %q, the Fake's %q", st.name, kernel.kinds[i], fake.kinds[i])
					}
				}
			})
		}
	}
}
