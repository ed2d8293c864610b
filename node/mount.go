package node

import "github.com/nodenet/nodenet/node/shim"

// Mount is one volume as a container sees it; the shim binds it.
type Mount = shim.Mount
