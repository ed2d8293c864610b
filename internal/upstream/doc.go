// Package upstream builds upstream components from the Go module proxy for
// tests that run nodenet side by side with them (interoperability), e.g.
// upstream flanneld peering with nodenet flanneld. Builds live outside the
// repository, in the user's cache directory, and are reused: a second run
// finds the binary and starts at once. Nothing from upstream is copied into
// the repository; sources are taken from the module cache at build time.
package upstream
