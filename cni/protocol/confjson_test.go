package protocol

import (
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
)

// toyConf has one key of each kind Decode's fast path sets.
type toyConf struct {
	NetConf
	Path    string         `json:"path"`
	MTU     int            `json:"mtu"`
	Masq    bool           `json:"masq"`
	Hairpin *bool          `json:"hairpin"`
	Extra   map[string]any `json:"extra"`
}

var toyFields = []Field[toyConf]{
	StringField("cniVersion", func(c *toyConf) *string { return &c.CNIVersion }),
	StringField("name", func(c *toyConf) *string { return &c.Name }),
	StringField("type", func(c *toyConf) *string { return &c.Type }),
	NestedField("dns", func(c *toyConf) any { return &c.DNS }),
	NestedField("prevResult", func(c *toyConf) any { return &c.RawPrevResult }),
	NestedField(ValidAttachmentsKey, func(c *toyConf) any { return &c.ValidAttachments }),
	NestedField(LegacyAttachmentsKey, func(c *toyConf) any { return &c.LegacyAttachments }),
	StringField("path", func(c *toyConf) *string { return &c.Path }),
	IntField("mtu", func(c *toyConf) *int { return &c.MTU }),
	BoolField("masq", func(c *toyConf) *bool { return &c.Masq }),
	OptionalBoolField("hairpin", func(c *toyConf) **bool { return &c.Hairpin }),
	NestedField("extra", func(c *toyConf) any { return &c.Extra }),
}

// agreesWithEncodingJSON reports how Decode differs from json.Unmarshal
// on in: in the error, or in what it decoded.
func agreesWithEncodingJSON(in string) error {
	var fast, std toyConf
	errFast := Decode([]byte(in), &fast, toyFields)
	errStd := json.Unmarshal([]byte(in), &std)
	if (errFast == nil) != (errStd == nil) || (errStd != nil && errFast.Error() != errStd.Error()) {
		return fmt.Errorf("%q: error %v, encoding/json says %v", in, errFast, errStd)
	}
	if !reflect.DeepEqual(fast, std) {
		return fmt.Errorf("%q:\n got %+v\nwant %+v", in, fast, std)
	}
	return nil
}

// decodeCases are documents Decode must read exactly as encoding/json:
// plain ones (the fast path) and every kind it hands over.
var decodeCases = []string{
	`{"cniVersion":"1.0.0","name":"n","type":"x","path":"/p","mtu":-1450,"masq":true,"hairpin":false,"extra":{"a":[1,"b",null]}}`,
	` { "cniVersion" : "1.1.0" , "name":"n", "mtu": 1450, "masq": true, "hairpin": false } `,
	`{"dns":{"nameservers":["1.1.1.1"]},"prevResult":{"cniVersion":"1.0.0"},"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`,
	`{"extra":{"x":[1,2.5e3,null,false,"\u00e9\n"]},"unknown":{"deep":[{"a":"b"}]}}`,
	`{"CNIVERSION":"1.0.0","Name":"n"}`, // case-insensitive keys
	`{"name":"n","name":"m"}`,           // repeated key
	`{"name":"caf\u00e9","type":"é"}`,   // escapes, non-ASCII
	`{"mtu":1450.0}`, `{"mtu":1e3}`,     // not an int
	`{"mtu":"big"}`, `{"masq":"yes"}`, // wrong type
	`{"mtu":0123}`,                    // leading zero
	`{"mtu":99999999999999999999}`,    // out of range
	`{"hairpin":null}`,                // null
	`{"x":"\uZZZZ"}`,                  // bad escape
	`{"name":"n",}`, `{"name":"n"} x`, // trailing comma, garbage
	`{"name":`, `{`, ``, `null`, `[]`, `"s"`, `{"a":tru}`, `{"a":-}`,
}

// TestDecodeMatchesEncodingJSON: Decode decodes exactly what encoding/json
// decodes, errors included, through its fast path or by handing the
// document over.
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, in := range decodeCases {
		if err := agreesWithEncodingJSON(in); err != nil {
			t.Error(err)
		}
	}
}

// FuzzDecode: whatever the input, Decode agrees with encoding/json.
func FuzzDecode(f *testing.F) {
	for _, in := range decodeCases {
		f.Add(in)
	}
	f.Fuzz(func(t *testing.T, in string) {
		if err := agreesWithEncodingJSON(in); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDecodeFastPath: a plain configuration is set by the fast path
// alone.
func TestDecodeFastPath(t *testing.T) {
	var c toyConf
	if !fastDecode([]byte(`{"cniVersion":"1.0.0","name":"n","mtu":1450,"masq":false,"hairpin":true,"extra":{}}`), &c, toyFields) ||
		c.MTU != 1450 || c.Name != "n" || c.Hairpin == nil || !*c.Hairpin {
		t.Fatalf("fast path refused a plain configuration: %+v", c)
	}
	if fastDecode([]byte(`{"NAME":"n"}`), &c, toyFields) {
		t.Fatal("fast path took a key that matches only case-insensitively")
	}
}
