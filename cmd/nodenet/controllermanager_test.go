package main

import (
	"slices"
	"testing"

	"github.com/nodenet/nodenet/internal/cli"
)

// TestEndpointsControllerEnabledByDefault: the Endpoints controller needs
// no configuration, so "*" (the default) runs it beside the EndpointSlice
// controller it mirrors, and it can be switched off by name.
func TestEndpointsControllerEnabledByDefault(t *testing.T) {
	names := func(f *cmFlags) []string {
		t.Helper()
		on, err := f.enabled()
		if err != nil {
			t.Fatal(err)
		}
		ctrls, cleanup, err := f.build(on)
		if err != nil {
			t.Fatal(err)
		}
		defer cleanup()
		var out []string
		for _, c := range ctrls {
			out = append(out, c.Name)
		}
		return out
	}
	if got := names(&cmFlags{}); !slices.Contains(got, "endpoints") || !slices.Contains(got, "endpointslice") || !slices.Contains(got, "daemonset") {
		t.Errorf("default controllers %v, want endpoints, endpointslice and daemonset", got)
	}
	if got := names(&cmFlags{controllers: cli.StringList{"*", "-endpoints"}}); slices.Contains(got, "endpoints") {
		t.Errorf("--controllers=*,-endpoints still runs it: %v", got)
	}
}
