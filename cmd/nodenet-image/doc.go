// Command nodenet-image builds nodenet's container image (see package
// daemonset/image) into an OCI/Docker archive: `make image`.
package main
