package protocol

import "encoding/json"

// Keys of the garbage collection section (spec 1.1).
const (
	ValidAttachmentsKey = "cni.dev/valid-attachments"
	// LegacyAttachmentsKey is the key libcni also sends, for plugins
	// written against an earlier draft of the GC spec.
	LegacyAttachmentsKey = "cni.dev/attachments"
)

// NetConf is what every network configuration has, whatever its plugin
// type: a plugin's configuration type embeds it and adds its own keys.
type NetConf struct {
	CNIVersion        string          `json:"cniVersion"`
	Name              string          `json:"name"`
	Type              string          `json:"type"`
	DNS               DNS             `json:"dns"`
	RawPrevResult     json.RawMessage `json:"prevResult,omitempty"`
	ValidAttachments  []GCAttachment  `json:"cni.dev/valid-attachments,omitempty"`
	LegacyAttachments []GCAttachment  `json:"cni.dev/attachments,omitempty"`
}

// GCAttachment is an entry of cni.dev/valid-attachments.
type GCAttachment struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifname"`
}
