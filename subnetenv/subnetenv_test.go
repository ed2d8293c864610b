package subnetenv

import (
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMarshalMatchesFlannelLayout(t *testing.T) {
	e := FromSubnets(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"),
		netip.MustParsePrefix("fd00:10:244::/56"), netip.MustParsePrefix("fd00:10:244:1::/64"), 1450, true)
	want := "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPV6_NETWORK=fd00:10:244::/56\nFLANNEL_IPV6_SUBNET=fd00:10:244:1::1/64\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
	if got := string(e.Marshal()); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	v4 := FromSubnets(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.7.0/24"), netip.Prefix{}, netip.Prefix{}, 1500, false)
	if got := string(v4.Marshal()); got != "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.7.1/24\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n" {
		t.Fatalf("v4 only: %q", got)
	}
}

func TestWriteReadRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "run", "flannel", "subnet.env")
	e := FromSubnets(netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.244.1.0/24"), netip.Prefix{}, netip.Prefix{}, 1450, true)
	if err := Write(path, e); err != nil {
		t.Fatal(err)
	}
	got, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if got != e {
		t.Fatalf("round trip: %+v != %+v", got, e)
	}
	gw, sn, ok := got.Gateway(false)
	if !ok || gw.String() != "10.244.1.1" || sn.String() != "10.244.1.0/24" {
		t.Fatalf("gateway %s %s %v", gw, sn, ok)
	}
	if _, _, ok := got.Gateway(true); ok {
		t.Fatal("IPv6 gateway on a v4-only env")
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
}

func TestReadMissing(t *testing.T) {
	_, err := Read(filepath.Join(t.TempDir(), "nope.env"))
	if !errors.Is(err, ErrNotExist) {
		t.Fatalf("got %v, want ErrNotExist", err)
	}
}

func TestParseErrorsNameTheKey(t *testing.T) {
	for _, tc := range []struct{ name, content, key string }{
		{"garbage line", "hello\n", "line 1"},
		{"bad cidr", "FLANNEL_NETWORK=banana\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", KeyNetwork},
		{"bad mtu", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=big\nFLANNEL_IPMASQ=true\n", KeyMTU},
		{"tiny mtu", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=10\nFLANNEL_IPMASQ=true\n", KeyMTU},
		{"bad masq", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=maybe\n", KeyIPMasq},
		{"missing mtu", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_IPMASQ=true\n", KeyMTU},
		{"subnet outside", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.99.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", KeySubnet},
		{"subnet is network address", "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.0/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", KeySubnet},
		{"subnet without network", "FLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", KeyNetwork},
		{"v6 family swap", "FLANNEL_IPV6_NETWORK=10.0.0.0/8\nFLANNEL_IPV6_SUBNET=10.1.0.1/16\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n", KeyIPv6Network},
		{"another tool's file", "DOCKER_OPTS=--bip=1.2.3.4/24\n", KeyMTU},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse("subnet.env", strings.NewReader(tc.content))
			var ke *KeyError
			if !errors.As(err, &ke) || ke.Key != tc.key {
				t.Fatalf("got %v, want a KeyError for %s", err, tc.key)
			}
			if !strings.Contains(err.Error(), "subnet.env") {
				t.Fatalf("error %q does not name the file", err)
			}
		})
	}
}
