// Package testbin builds the nodenet and nodenet-cni binaries once per test
// process, for tests that run them as real processes (the node agent, a
// local cluster).
package testbin
