package cni

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestConfFieldsSetTheirKeys: a configuration with every key set decodes
// through confFields exactly as encoding/json decodes it, so each setter
// sets its own key's field (the fast path itself is protocol.Decode's,
// tested there).
func TestConfFieldsSetTheirKeys(t *testing.T) {
	in := []byte(`{"cniVersion":"1.1.0","name":"cbr0","type":"nodenet","subnetFile":"/s","dataDir":"/d","bridge":"br0","logFile":"/l",
		"mtu":1450,"ipMasq":true,"forceAddress":true,"hairpinMode":false,"isDefaultGateway":true,"dns":{"nameservers":["10.96.0.10"]},
		"prevResult":{"cniVersion":"1.0.0"},"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}],
		"cni.dev/attachments":[{"containerID":"b","ifname":"eth1"}],"ranges":[[{"subnet":"10.0.0.0/24"}]],"delegate":{"x":1},
		"ipam":{"type":"host-local"},"args":{"cni":{"ips":["10.0.0.9"]}},"runtimeConfig":{"ips":["10.0.0.2"]}}`)
	var fast, std NetConf
	if err := decodeConf(in, &fast); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(in, &std); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fast, std) {
		t.Fatalf("decodeConf:\n got %+v\nwant %+v", fast, std)
	}
}

// TestConfFieldsCoverNetConf: confFields names every JSON key of NetConf
// (the embedded common keys included) once; a key missing from it would
// be left unset by the fast path where encoding/json sets it.
func TestConfFieldsCoverNetConf(t *testing.T) {
	var keys func(reflect.Type) []string
	keys = func(typ reflect.Type) (out []string) {
		for f := range typ.Fields() {
			if f.Anonymous {
				out = append(out, keys(f.Type)...)
				continue
			}
			if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); name != "-" {
				out = append(out, name)
			}
		}
		return out
	}
	var table []string
	for _, f := range confFields {
		table = append(table, f.Key)
	}
	want := keys(reflect.TypeFor[NetConf]())
	slices.Sort(want)
	slices.Sort(table)
	if !slices.Equal(table, want) {
		t.Fatalf("confFields has %v\nNetConf has %v", table, want)
	}
}
