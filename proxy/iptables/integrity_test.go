package iptables

import (
	"context"
	"maps"
	"slices"
	"testing"

	ipt "github.com/nodenet/nodenet/internal/iptables"
	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestIntact: the proxier notices its hooks or chains removed behind its
// back, against the Fake and against the kernel alike.
func TestIntact(t *testing.T) {
	runners := map[string]func(t *testing.T) ipt.Runner{
		"fake": func(*testing.T) ipt.Runner { return ipt.NewFake() },
		"kernel": func(t *testing.T) ipt.Runner {
			nettest.RequirePrivileged(t)
			nettest.RequireTool(t, "iptables-nft-restore")
			return kernelRunner(nettest.New(t), proxy.IPv4, ipt.NFT)
		},
	}
	damages := map[string]string{
		"nat PREROUTING hook deleted": "*nat\n-D PREROUTING " + hooks[0].rule + "\nCOMMIT\n",
		"NODENET-MARK-MASQ flushed":   "*nat\n:" + chainMarkMasq + " - [0:0]\nCOMMIT\n",
		"filter FORWARD hook deleted": "*filter\n-D FORWARD " + hooks[len(hooks)-1].rule + "\nCOMMIT\n",
		// The chaos suite's "proxy rules flushed": every other canary
		// stays, every ClusterIP stops working.
		"nat NODENET-SERVICES flushed": "*nat\n:" + chainServices + " - [0:0]\nCOMMIT\n",
	}
	for name, mk := range runners {
		t.Run(name, func(t *testing.T) {
			r := mk(t)
			proxytest.CheckIntact(t, New(proxy.IPv4, r, nil), slices.Sorted(maps.Keys(damages)), func(ctx context.Context, what string) error {
				return r.Restore(ctx, []byte(damages[what]))
			})
		})
	}
}
