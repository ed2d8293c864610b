// Package cnideps pins the CNI modules in go.mod until the plugin imports them.
package cnideps

import (
	_ "github.com/containernetworking/cni/libcni"
	_ "github.com/containernetworking/cni/pkg/skel"
	_ "github.com/containernetworking/plugins/pkg/ns"
)
