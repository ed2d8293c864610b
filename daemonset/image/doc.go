// Package image writes nodenet's container image as an OCI image layout in
// one tar file, with a Docker-archive manifest.json beside it, so the same
// file loads with `docker load`, `ctr images import` and
// `kind load image-archive` — without a Docker daemon or a registry.
//
// Everything is deterministic: layers are tar streams with sorted entries,
// root ownership and one fixed timestamp, gzip without a name or time, and
// JSON with fixed field order. Building the same inputs twice gives the
// same bytes, hence the same image digest.
//
// The package only assembles: Layer describes files, Write packs layers and
// a config. Where the files come from (Go builds, Debian packages) is
// build.go and debs.go.
package image
