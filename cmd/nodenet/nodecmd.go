package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nodenet/nodenet/cluster"
)

// runNode is `nodenet node restart NAME [--dir D]`: a node of a running
// local cluster restarted as a reboot would (cluster.RestartNode), done
// by the cluster's `up`, which supervises the node's agent.
func runNode(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("node restart", flag.ContinueOnError)
	dir := fs.String("dir", defaultStateDir, "state directory of the running cluster")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: nodenet node restart NAME [--dir DIR]\n\n"+
			"Restarts one node of a running `nodenet up` cluster as a reboot would: every process of the\n"+
			"node and its pods killed, their namespaces removed, the node's /run cleared, then the node back\n"+
			"with the same name, address and MAC, and its agent started again.\n\nflags:\n")
		fs.PrintDefaults()
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		// `nodenet node --help` asks for this text; anything else is a
		// usage error.
		if err := fs.Parse(args); err != nil {
			return err
		}
		return errors.New("usage: nodenet node restart NAME [--dir DIR]")
	}
	if args[0] != "restart" {
		return fmt.Errorf("unknown node command %q: want restart", args[0])
	}
	rest := args[1:]
	var name string
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	if name == "" {
		return errors.New("usage: nodenet node restart NAME [--dir DIR]: the node's name is missing")
	}
	start := time.Now()
	r, err := cluster.RestartNodeVia(ctx, *dir, name)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stdout, "%s restarted in %s (eth0 %s kept; %d pod namespaces removed); its agent is starting: kubectl --kubeconfig %s/admin.kubeconfig get pods -A -o wide --field-selector spec.nodeName=%s\n",
		r.Node, time.Since(start).Round(time.Millisecond), r.MAC, len(r.PodNetns), *dir, r.Node)
	return nil
}
