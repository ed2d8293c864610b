package apiserver

import (
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodenet/nodenet/apiserver/allocator"
	"github.com/nodenet/nodenet/apiserver/storage"
	"github.com/nodenet/nodenet/internal/cidrlist"
)

// TestAbandonKeepsAValueTakenUnderEitherKey: a ClusterIP is claimed under
// two keys (the claim and its IPAddress object). When another writer holds
// the IP under one of them, the hint must stay taken although the other key
// of the same IP is abandoned — otherwise every retry picks the same IP
// again and a create fails with "could not allocate after 16 attempts"
// while a free IP exists (a flake TestServiceAllocationStaleHints showed).
func TestAbandonKeepsAValueTakenUnderEitherKey(t *testing.T) {
	a, err := newServiceAllocator(cidrlist.MustParse("10.100.0.0/29"), allocator.PortRange{Base: 30000, Size: 10})
	if err != nil {
		t.Fatal(err)
	}
	a.ipObjects = storage.NewStore(nil, "/registry/ipaddresses", networkingv1.SchemeGroupVersion.WithKind("IPAddress"),
		func() runtime.Object { return &networkingv1.IPAddress{} })
	const ip = "10.100.0.3"
	for _, held := range []string{serviceIPKeys + ip, a.ipObjects.Key("", ip)} {
		a.ips.Add(ip) // the pick
		put := map[string]string{serviceIPKeys + ip: "default/a"}
		a.ipAddressClaims(put)
		if len(put) != 2 {
			t.Fatalf("claims of one ClusterIP = %v, want the claim and its IPAddress", put)
		}
		a.taken([]string{held})
		a.abandon(storage.Claims{Put: put}, map[string]bool{}, []string{held})
		if !a.ips.Has(ip) {
			t.Errorf("held under %s: %s was forgotten, so the next attempt can pick it again", held, ip)
		}
		a.ips.Remove(ip)
	}
}
