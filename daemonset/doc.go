// Package daemonset names what the DaemonSet manifest (daemonset/manifest)
// and the image builder (daemonset/image) must agree on: the image's name
// and where the binaries sit in it. It is a leaf, so the product binary
// can render the manifest without linking the image builder.
package daemonset
