package daemonset

import "github.com/nodenet/nodenet/internal/version"

// DefaultImage is the name the image is built and loaded as, and the image
// daemonset/nodenet.yaml runs.
const DefaultImage = "nodenet/nodenet:" + version.Kubernetes + "-nodenet"

// Binary paths inside the image.
const (
	NodenetPath    = "/usr/local/bin/nodenet"
	NodenetCNIPath = "/usr/local/bin/nodenet-cni"
	// NodenetProxyPath is the proxy alone (cmd/nodenet-proxy): the
	// DaemonSet's proxy container runs it rather than `nodenet proxy`,
	// for the memory the multi-call binary's pages would cost every node.
	NodenetProxyPath = "/usr/local/bin/nodenet-proxy"
)
