package flanneld

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"text/template"

	"github.com/nodenet/nodenet/internal/atomicfile"
)

// DefaultCNIConfTemplate is the conflist for nodenet's CNI plugin, the
// counterpart of upstream's 10-flannel.conflist. It is a text/template
// over CNIConfData; {{json .X}} quotes a value as JSON.
const DefaultCNIConfTemplate = `{
  "cniVersion": "1.0.0",
  "name": "cbr0",
  "plugins": [
    {
      "type": "nodenet",
      "subnetFile": {{json .SubnetFile}},
      "bridge": "cni0",
      "isDefaultGateway": true,
      "hairpinMode": true
    },
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }
  ]
}
`

// CNIConfData is what a conflist template can refer to.
type CNIConfData struct {
	SubnetFile      string
	Network, Subnet string // IPv4, empty when disabled
	IPv6Network     string
	IPv6Subnet      string
	MTU             int
	IPMasq          bool
	BackendType     string
	NodeName        string
	Networks        []string
}

func newCNIConfData(subnetFile, node string, cfg *Config, own Lease, mtu int, ipMasq bool) CNIConfData {
	d := CNIConfData{SubnetFile: subnetFile, MTU: mtu, IPMasq: ipMasq, BackendType: cfg.Backend.Type, NodeName: node}
	str := func(p netip.Prefix) string {
		if !p.IsValid() {
			return ""
		}
		return p.String()
	}
	if cfg.EnableIPv4 {
		d.Network, d.Subnet = cfg.Network.String(), str(own.Subnet)
	}
	if cfg.EnableIPv6 {
		d.IPv6Network, d.IPv6Subnet = cfg.IPv6Network.String(), str(own.IPv6Subnet)
	}
	for _, n := range cfg.Networks() {
		d.Networks = append(d.Networks, n.String())
	}
	return d
}

// parseCNITemplate checks a template early, so a bad one fails before the
// daemon touches the kernel.
func parseCNITemplate(text string) (*template.Template, error) {
	if text == "" {
		text = DefaultCNIConfTemplate
	}
	t, err := template.New("cni-conf").Option("missingkey=error").Funcs(template.FuncMap{
		"json": func(v any) (string, error) {
			b, err := json.Marshal(v)
			return string(b), err
		},
	}).Parse(text)
	if err != nil {
		return nil, fmt.Errorf("parse CNI conf template: %w", err)
	}
	return t, nil
}

// renderCNIConf renders and checks that the result is a JSON object.
func renderCNIConf(t *template.Template, d CNIConfData) ([]byte, error) {
	var b bytes.Buffer
	if err := t.Execute(&b, d); err != nil {
		return nil, fmt.Errorf("render CNI conf: %w", err)
	}
	var obj map[string]any
	if err := json.Unmarshal(b.Bytes(), &obj); err != nil {
		return nil, fmt.Errorf("rendered CNI conf is not a JSON object: %w", err)
	}
	return b.Bytes(), nil
}

// writeFileAtomic writes data to path through a temp file in the same
// directory and a rename, and skips the write when the content is
// already there (the runtime watches /etc/cni/net.d).
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if cur, err := os.ReadFile(path); err == nil && bytes.Equal(cur, data) {
		return nil
	}
	return atomicfile.Write(path, data, perm)
}
