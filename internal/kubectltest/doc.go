// Package kubectltest finds the real kubectl clients on the machine for
// tests that drive nodenet's API server with them, so every such test looks
// in the same places and skips or fails for the same reason.
//
// The machines this suite runs on ship several client versions as
// kubectl.1.NN beside the kubectl on PATH (e.g. /usr/bin/kubectl →
// …/google-cloud-sdk/bin/kubectl, with kubectl.1.27 … kubectl.1.33 next to
// it). A version is looked for in every PATH directory and beside the
// target of every kubectl on PATH. A missing client goes through
// internal/nettest's gate: the test skips with the places looked in, or
// fails under NODENET_PRIVILEGED=1, where the clients are promised.
package kubectltest
