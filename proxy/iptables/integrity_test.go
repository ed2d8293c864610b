package iptables

import (
	"context"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
)

// TestIntact: the proxier notices its hooks or chains removed behind its
// back, against the Fake and against the kernel alike.
func TestIntact(t *testing.T) {
	runners := map[string]func(t *testing.T) Runner{
		"fake": func(*testing.T) Runner { return NewFake() },
		"kernel": func(t *testing.T) Runner {
			nettest.RequirePrivileged(t)
			nettest.RequireTool(t, "iptables-nft-restore")
			return ExecRunner{Prefix: []string{"ip", "netns", "exec", nettest.New(t).Name()}, Family: proxy.IPv4, Variant: NFT}
		},
	}
	damages := map[string]string{
		"nat PREROUTING hook deleted": "*nat\n-D PREROUTING " + hooks[0].rule + "\nCOMMIT\n",
		"NODENET-MARK-MASQ flushed":   "*nat\n:" + chainMarkMasq + " - [0:0]\nCOMMIT\n",
		"filter FORWARD hook deleted": "*filter\n-D FORWARD " + hooks[len(hooks)-1].rule + "\nCOMMIT\n",
	}
	for name, mk := range runners {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			r := mk(t)
			p := New(proxy.IPv4, r, nil)
			check := func(step string, want bool) {
				t.Helper()
				got, err := p.Intact(ctx)
				if err != nil || got != want {
					t.Fatalf("%s: Intact = %v, %v; want %v", step, got, err, want)
				}
			}
			check("before the first sync", true)
			for what, script := range damages {
				if _, err := p.Sync(ctx, mkSnap(proxy.IPv4, goldenServices(proxy.IPv4)...), full); err != nil {
					t.Fatal(err)
				}
				check("after a full sync", true)
				if err := r.Restore(ctx, []byte(script)); err != nil {
					t.Fatalf("%s: %v", what, err)
				}
				check("after "+what, false)
			}
		})
	}
}
