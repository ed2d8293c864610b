//go:build !nodenet_cnitest

package main

import "github.com/nodenet/nodenet/cni"

// installTestHooks does nothing in a production build; see hooks_cnitest.go.
func installTestHooks(*cni.Plugin) {}
