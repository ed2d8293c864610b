package flanneld

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// Annotation keys, wire-compatible with upstream flannel's default prefix
// (flannel.alpha.coreos.com), so nodes running either form one network.
const (
	AnnotationPrefix          = "flannel.alpha.coreos.com/"
	AnnKubeSubnetManager      = AnnotationPrefix + "kube-subnet-manager"
	AnnBackendType            = AnnotationPrefix + "backend-type"
	AnnBackendData            = AnnotationPrefix + "backend-data"
	AnnBackendV6Data          = AnnotationPrefix + "backend-v6-data"
	AnnPublicIP               = AnnotationPrefix + "public-ip"
	AnnPublicIPv6             = AnnotationPrefix + "public-ipv6"
	AnnNodePublicIP           = AnnotationPrefix + "node-public-ip"
	AnnNodePublicIPv6         = AnnotationPrefix + "node-public-ipv6"
	AnnPublicIPOverwrite      = AnnotationPrefix + "public-ip-overwrite"
	AnnPublicIPv6Overwrite    = AnnotationPrefix + "public-ipv6-overwrite"
	ConditionReasonFlannelUp  = "FlannelIsUp"
	conditionMessageFlannelUp = "Flannel is running on this node"
)

// Lease is one node's share of the network and how to reach it.
type Lease struct {
	Node                 string
	Subnet, IPv6Subnet   netip.Prefix
	PublicIP, PublicIPv6 netip.Addr
	BackendType          string
	// Backend data per family; for vxlan {"VNI":1,"VtepMAC":"…"}.
	BackendData, BackendV6Data json.RawMessage
}

// LocalAttrs is what this node publishes about itself.
type LocalAttrs struct {
	PublicIP, PublicIPv6       netip.Addr
	BackendType                string
	BackendData, BackendV6Data json.RawMessage
}

// VXLANData is the vxlan backend's backend-data, as upstream encodes it
// (a Go struct marshalled with default field names).
type VXLANData struct {
	VNI     int
	VtepMAC hardwareAddr
}

// hardwareAddr marshals like net.HardwareAddr does in upstream flannel
// (its own type with a String-based MarshalJSON).
type hardwareAddr net.HardwareAddr

func (a hardwareAddr) MarshalJSON() ([]byte, error) {
	return json.Marshal(net.HardwareAddr(a).String())
}

func (a *hardwareAddr) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	mac, err := net.ParseMAC(s)
	if err != nil {
		return err
	}
	*a = hardwareAddr(mac)
	return nil
}

func encodeVXLANData(vni int, mac net.HardwareAddr) json.RawMessage {
	b, _ := json.Marshal(VXLANData{VNI: vni, VtepMAC: hardwareAddr(mac)})
	return b
}

func decodeVXLANData(raw json.RawMessage) (VXLANData, error) {
	var d VXLANData
	if len(raw) == 0 || string(raw) == "null" {
		return d, fmt.Errorf("no vxlan backend data")
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		return d, fmt.Errorf("decode vxlan backend data %s: %w", raw, err)
	}
	if len(d.VtepMAC) != 6 {
		return d, fmt.Errorf("vxlan backend data %s: no VtepMAC", raw)
	}
	return d, nil
}

// podCIDRs returns the node's pod CIDRs per family from spec.podCIDRs,
// falling back to spec.podCIDR, as upstream's kube subnet manager does.
func podCIDRs(n *corev1.Node) (v4, v6 netip.Prefix, err error) {
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	if len(cidrs) > 2 {
		return v4, v6, fmt.Errorf("node %s: %d podCIDRs; want one per IP family", n.Name, len(cidrs))
	}
	for _, s := range cidrs {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return v4, v6, fmt.Errorf("node %s: podCIDR %q: %w", n.Name, s, err)
		}
		if p.Addr().Is4() {
			v4 = p.Masked()
		} else {
			v6 = p.Masked()
		}
	}
	return v4, v6, nil
}

// nodeLease reads a peer's lease from its Node: flannel's annotations plus
// its podCIDRs. ok is false for nodes that do not take part (no
// kube-subnet-manager annotation, no podCIDR yet).
func nodeLease(n *corev1.Node) (l Lease, ok bool, err error) {
	if n.Annotations[AnnKubeSubnetManager] != "true" {
		return l, false, nil
	}
	l.Node = n.Name
	if l.Subnet, l.IPv6Subnet, err = podCIDRs(n); err != nil {
		return l, false, err
	}
	if !l.Subnet.IsValid() && !l.IPv6Subnet.IsValid() {
		return l, false, nil
	}
	return leaseFromAnnotations(l, n.Annotations)
}

// leaseFromAnnotations fills in the attributes a node (or a lease object)
// publishes under flannel's keys.
func leaseFromAnnotations(l Lease, ann map[string]string) (Lease, bool, error) {
	l.BackendType = ann[AnnBackendType]
	if s := ann[AnnPublicIP]; s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is4() {
			return l, false, fmt.Errorf("%s: %s %q is not an IPv4 address", l.Node, AnnPublicIP, s)
		}
		l.PublicIP = a
	}
	if s := ann[AnnPublicIPv6]; s != "" {
		a, err := netip.ParseAddr(s)
		if err != nil || !a.Is6() || a.Is4In6() {
			return l, false, fmt.Errorf("%s: %s %q is not an IPv6 address", l.Node, AnnPublicIPv6, s)
		}
		l.PublicIPv6 = a
	}
	if s := ann[AnnBackendData]; s != "" {
		l.BackendData = json.RawMessage(s)
	}
	if s := ann[AnnBackendV6Data]; s != "" {
		l.BackendV6Data = json.RawMessage(s)
	}
	return l, true, nil
}

// publishedAnnotations is what this node writes: upstream's AcquireLease
// rules, including public-ip-overwrite, which replaces the address peers
// see.
func publishedAnnotations(current map[string]string, a LocalAttrs) map[string]string {
	out := map[string]string{
		AnnKubeSubnetManager: "true",
		AnnBackendType:       a.BackendType,
	}
	if a.PublicIP.IsValid() {
		out[AnnPublicIP] = a.PublicIP.String()
		if ow := current[AnnPublicIPOverwrite]; ow != "" {
			out[AnnPublicIP] = ow
		}
		if len(a.BackendData) > 0 {
			out[AnnBackendData] = string(a.BackendData)
		} else {
			out[AnnBackendData] = "null"
		}
	}
	if a.PublicIPv6.IsValid() {
		out[AnnPublicIPv6] = a.PublicIPv6.String()
		if ow := current[AnnPublicIPv6Overwrite]; ow != "" {
			out[AnnPublicIPv6] = ow
		}
		if len(a.BackendV6Data) > 0 {
			out[AnnBackendV6Data] = string(a.BackendV6Data)
		} else {
			out[AnnBackendV6Data] = "null"
		}
	}
	return out
}

// needsPatch reports whether any of want differs from have.
func needsPatch(have, want map[string]string) bool {
	for k, v := range want {
		if have[k] != v {
			return true
		}
	}
	return false
}
