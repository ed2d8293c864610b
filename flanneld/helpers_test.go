package flanneld

import (
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/nodenet/nodenet/internal/testapi"
)

// newTestDaemon builds a Daemon without an API server, for tests of the
// steps that need none.
func newTestDaemon(t *testing.T, o Options) *Daemon {
	t.Helper()
	if o.NodeName == "" {
		o.NodeName = "node-a"
	}
	if o.Client == nil {
		o.Client = fake.NewSimpleClientset()
	}
	o.Logger = testapi.Logger()
	d, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
