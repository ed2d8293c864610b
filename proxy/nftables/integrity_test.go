package nftables

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/nodenet/nodenet/internal/nettest"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxytest"
)

// TestIntact: the proxier notices its table flushed or deleted behind its
// back, against the Fake and against the kernel alike.
func TestIntact(t *testing.T) {
	runners := map[string]func(t *testing.T) Runner{
		"fake": func(*testing.T) Runner { return NewFake() },
		"kernel": func(t *testing.T) Runner {
			nettest.RequirePrivileged(t)
			nettest.RequireTool(t, "nft")
			r := &ExecRunner{Netns: nettest.New(t).Name()}
			t.Cleanup(func() { r.Close() })
			return r
		},
	}
	for name, mk := range runners {
		t.Run(name, func(t *testing.T) {
			r := mk(t)
			damages := []string{"flush table ip " + TableName, "delete table ip " + TableName, "flush ruleset"}
			if name == "fake" {
				damages[2] = "delete table ip " + TableName // the Fake has no ruleset command
			}
			proxytest.CheckIntact(t, New(proxy.IPv4, r, nil), damages, func(ctx context.Context, damage string) error {
				return r.Apply(ctx, []byte(damage+"\n"))
			})
		})
	}
}

// TestSocketFollowsRecreatedNamespace: the long-lived netlink socket must
// not keep programming a namespace that was deleted and created again
// under the same name; Close lets go of it, and the runner opens a new one
// when it needs one again.
func TestSocketFollowsRecreatedNamespace(t *testing.T) {
	nettest.RequirePrivileged(t)
	nettest.RequireTool(t, "nft")
	name := fmt.Sprintf("nnt-recreate-%d", os.Getpid())
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	run("netns", "add", name)
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	ctx := context.Background()
	r := &ExecRunner{Netns: name}
	defer r.Close()
	if err := r.Apply(ctx, []byte("add table ip "+TableName+"\nadd chain ip "+TableName+" services\nadd rule ip "+TableName+" services accept\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RuleCount(ctx, "ip", TableName, "services"); err != nil || n != 1 {
		t.Fatalf("rules in the first namespace: %d, %v; want 1", n, err)
	}
	run("netns", "del", name)
	run("netns", "add", name)
	if n, err := r.RuleCount(ctx, "ip", TableName, "services"); err != nil || n != 0 {
		t.Fatalf("rules in the re-created namespace: %d, %v; want 0 (the socket stayed in the old one)", n, err)
	}
	if err := r.Close(); err != nil || r.conn != nil {
		t.Fatalf("Close: %v, socket %v", err, r.conn)
	}
	if err := r.Apply(ctx, []byte("add table ip "+TableName+"\nadd chain ip "+TableName+" services\nadd rule ip "+TableName+" services accept\n")); err != nil {
		t.Fatal(err)
	}
	if n, err := r.RuleCount(ctx, "ip", TableName, "services"); err != nil || n != 1 || r.conn == nil {
		t.Fatalf("rules after Close: %d, %v; want 1 through a new socket", n, err)
	}
}
