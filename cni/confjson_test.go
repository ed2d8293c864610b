package cni

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// TestDecodeConfMatchesEncodingJSON: the fast path decodes exactly what
// encoding/json decodes, and hands everything odd to it (so errors are
// its errors).
func TestDecodeConfMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"cniVersion":"1.0.0","name":"cbr0","type":"nodenet","subnetFile":"/run/flannel/subnet.env","dataDir":"/var/lib/cni/networks"}`,
		` { "cniVersion" : "1.1.0" , "name":"n", "mtu": 1450, "ipMasq": true, "hairpinMode": false, "isDefaultGateway": true, "forceAddress": false } `,
		`{"cniVersion":"1.0.0","name":"n","dns":{"nameservers":["1.1.1.1"]},"ranges":[[{"subnet":"10.0.0.0/24"}]],"runtimeConfig":{"ips":["10.0.0.2"]}}`,
		`{"cniVersion":"1.0.0","name":"n","type":"flannel","delegate":{"hairpinMode":true,"x":[1,2.5e3,null,false,"\u00e9\n"]},"ipam":{}}`,
		`{"cniVersion":"1.0.0","name":"n","prevResult":{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.2/24"}]},"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`,
		`{"cniVersion":"1.0.0","name":"n","args":{"cni":{"ips":["10.0.0.9"]}},"unknown":{"deep":[{"a":"b"}]},"capabilities":{"portMappings":true}}`,
		`{"CNIVERSION":"1.0.0","Name":"n"}`,                    // case-insensitive keys
		`{"cniVersion":"1.0.0","name":"n","name":"m"}`,         // repeated key
		`{"cniVersion":"1.0.0","name":"caf\u00e9","type":"é"}`, // escapes, non-ASCII
		`{"cniVersion":"1.0.0","name":"n","mtu":1450.0}`,       // not an int
		`{"cniVersion":"1.0.0","name":"n","mtu":"big"}`,        // wrong type
		`{"cniVersion":"1.0.0","name":"n","mtu":0123}`,         // leading zero
		`{"cniVersion":"1.0.0","name":"n","hairpinMode":null}`, // null
		`{"cniVersion":"1.0.0","name":"n","x":"\uZZZZ"}`,       // bad escape
		`{"cniVersion":"1.0.0","name":"n",}`,                   // trailing comma
		`{"cniVersion":"1.0.0"} x`,                             // trailing garbage
		`{"cniVersion":`, `{`, ``, `null`, `[]`, `"s"`, `{"a":tru}`, `{"a":-}`,
	} {
		var fast, std NetConf
		errFast := decodeConf([]byte(in), &fast)
		errStd := json.Unmarshal([]byte(in), &std)
		if (errFast == nil) != (errStd == nil) || (errStd != nil && errFast.Error() != errStd.Error()) {
			t.Errorf("%s: error %v, encoding/json says %v", in, errFast, errStd)
			continue
		}
		if !reflect.DeepEqual(fast, std) {
			t.Errorf("%s:\n got %+v\nwant %+v", in, fast, std)
		}
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

// FuzzDecodeConf: whatever the input, decodeConf agrees with
// encoding/json.
func FuzzDecodeConf(f *testing.F) {
	f.Add(`{"cniVersion":"1.0.0","name":"cbr0","type":"nodenet","mtu":1450,"hairpinMode":true}`)
	f.Add(`{"cniVersion":"1.0.0","name":"n","dns":{"search":["a"]},"delegate":{"x":[1,"\u0041"]}}`)
	f.Fuzz(func(t *testing.T, in string) {
		var fast, std NetConf
		errFast := decodeConf([]byte(in), &fast)
		errStd := json.Unmarshal([]byte(in), &std)
		if (errFast == nil) != (errStd == nil) || (errStd != nil && errFast.Error() != errStd.Error()) {
			t.Fatalf("%q: error %v, encoding/json says %v", in, errFast, errStd)
		}
		if errStd == nil && !reflect.DeepEqual(fast, std) {
			t.Fatalf("%q:\n got %+v\nwant %+v", in, fast, std)
		}
	})
}
