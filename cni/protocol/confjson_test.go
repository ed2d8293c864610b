package protocol

import (
	"encoding/json"
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

// TestDecodeMatchesEncodingJSON: Decode decodes exactly what
// encoding/json decodes, errors included, through its fast path or by
// handing the document over.
func TestDecodeMatchesEncodingJSON(t *testing.T) {
	for _, in := range []string{
		`{"cniVersion":"1.0.0","name":"n","type":"x","path":"/p","mtu":-1450,"masq":true,"hairpin":false,"extra":{"a":[1,"b",null]}}`,
		`{"dns":{"nameservers":["1.1.1.1"]},"prevResult":{"cniVersion":"1.0.0"},"cni.dev/valid-attachments":[{"containerID":"a","ifname":"eth0"}]}`,
		`{"Name":"n"}`, `{"name":"n","name":"m"}`, `{"name":"caf\u00e9"}`, `{"name":"é"}`,
		`{"mtu":1.5}`, `{"mtu":1e3}`, `{"mtu":"big"}`, `{"mtu":99999999999999999999}`, `{"masq":"yes"}`, `{"hairpin":null}`,
		`{"unknown":{"deep":[{"a":"b"}]}}`, `{"name":"n",}`, `{"name":"n"} x`, `{"name":`, `[]`, `null`, ``,
	} {
		var fast, std toyConf
		errFast := Decode([]byte(in), &fast, toyFields)
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
