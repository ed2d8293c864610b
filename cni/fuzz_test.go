package cni

import (
	"encoding/json"
	"testing"

	"github.com/nodenet/nodenet/cni/protocol"
)

// FuzzParseConfig feeds the plugin's stdin parser (the runtime's network
// configuration, prevResult included) arbitrary bytes. It must never panic,
// every refusal must carry a CNI error code, and an accepted prevResult must
// come out of the plugin's hand-written result encoder as valid JSON that
// decodes again to the same number of interfaces, IPs and routes.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		`{"cniVersion":"1.1.0","name":"cbr0","type":"nodenet","subnetFile":"/run/flannel/subnet.env"}`,
		`{"cniVersion":"1.0.0","name":"cbr0","type":"flannel","delegate":{"hairpinMode":true,"isDefaultGateway":true}}`,
		`{"cniVersion":"0.3.1","name":"n","type":"nodenet","ranges":[[{"subnet":"10.244.1.0/24","gateway":"10.244.1.1"}]]}`,
		`{"cniVersion":"1.1.0","name":"cbr0","type":"nodenet","prevResult":{"cniVersion":"1.1.0","interfaces":[{"name":"eth0","mac":"0a:58:0a:f4:01:05","sandbox":"/var/run/netns/x"}],"ips":[{"address":"10.244.1.5/24","gateway":"10.244.1.1","interface":0}],"routes":[{"dst":"0.0.0.0/0","gw":"10.244.1.1"}],"dns":{"nameservers":["10.96.0.10"]}}}`,
		`{"cniVersion":"0.4.0","name":"x","type":"nodenet","prevResult":{"ips":[{"version":"4","address":"10.0.0.2/24"}]}}`,
		`{"cniVersion":"1.1.0","name":"bad name!","type":"nodenet"}`,
		`{"cniVersion":"9.9.9"}`,
		`not json`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, stdin []byte) {
		c, err := ParseConfig(stdin)
		if err != nil {
			if protocol.Code(err) == 0 {
				t.Fatalf("refusal without a CNI error code: %v", err)
			}
			return
		}
		if c.PrevResult == nil {
			return
		}
		out, err := json.Marshal(c.PrevResult)
		if err != nil {
			t.Fatalf("encode prevResult: %v", err)
		}
		if !json.Valid(out) {
			t.Fatalf("the result encoder wrote invalid JSON: %s", out)
		}
		var back protocol.Result
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("own result refused: %v\n%s", err, out)
		}
		if len(back.Interfaces) != len(c.PrevResult.Interfaces) || len(back.IPs) != len(c.PrevResult.IPs) || len(back.Routes) != len(c.PrevResult.Routes) {
			t.Fatalf("round trip lost entries: %s", out)
		}
	})
}
