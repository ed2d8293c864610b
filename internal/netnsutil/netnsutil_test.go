package netnsutil_test

import (
	"net"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/internal/nettest"
)

func TestDoEntersAndRestores(t *testing.T) {
	ns := nettest.New(t)
	var inside, before netns.NsHandle
	before, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	var ln net.Listener
	err = netnsutil.Do(ns.Path(), func() error {
		inside, err = netns.Get()
		if err != nil {
			return err
		}
		ln, err = net.Listen("tcp", "127.0.0.1:0") // stays in ns
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer inside.Close()
	defer ln.Close()
	target, _ := netns.GetFromPath(ns.Path())
	defer target.Close()
	if !inside.Equal(target) {
		t.Fatal("fn did not run in the target namespace")
	}
	if err := netnsutil.Do("/nonexistent/netns", func() error { return nil }); err == nil {
		t.Fatal("want an error for a missing namespace")
	}
}
