// Package docs holds nodenet's architecture document, ARCHITECTURE.md, and
// the test that enforces the dependency rules it states (deps_test.go).
//
// The rules are a table in that test rather than prose only, so a change
// that breaks one fails `go test ./docs` with the rule's name and the import
// chain that broke it, instead of being found in review or not at all. The
// package has no code of its own: nothing imports it.
package docs
