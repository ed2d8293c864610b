package subnetenv

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

// FuzzParse holds the subnet.env reader (a file any tool may have written)
// to: no panic, and whatever it accepts it writes back in a form that
// parses to the same Env.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n",
		"FLANNEL_IPV6_NETWORK=fd00::/56\nFLANNEL_IPV6_SUBNET=fd00:0:0:1::1/64\nFLANNEL_MTU=1500\nFLANNEL_IPMASQ=false\n",
		"# comment\n\nFLANNEL_NETWORK=\"10.244.0.0/16\"\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\nOTHER=x\n",
		"FLANNEL_MTU=70000\nFLANNEL_IPMASQ=maybe\n",
		"not a line",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		e, err := Parse("fuzz", bytes.NewReader(data))
		if err != nil {
			if !strings.Contains(err.Error(), "fuzz") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		out := e.Marshal()
		back, err := Parse("fuzz", bytes.NewReader(out))
		if err != nil {
			t.Fatalf("own output refused: %v\n%s", err, out)
		}
		if !reflect.DeepEqual(back, e) {
			t.Fatalf("round trip changed the env:\n%+v\n%s\n%+v", e, out, back)
		}
	})
}
