package main

import (
	"context"
	"errors"
	"flag"
	"fmt"

	"github.com/nodenet/nodenet/cni"
	"github.com/nodenet/nodenet/daemonset/manifest"
	"github.com/nodenet/nodenet/flanneld"
	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/ipam/hostlocal"
	"github.com/nodenet/nodenet/proxy"
	"github.com/nodenet/nodenet/proxy/proxycmd"
	"github.com/nodenet/nodenet/subnetenv"
)

// runCleanup is `nodenet cleanup`: everything nodenet put on this node
// goes — flanneld's state, the CNI plugin's, every proxy mode's rules.
// The defaults are the DaemonSet's paths. Each part is tried even when
// another fails; the error names every part that left something behind.
func runCleanup(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("cleanup", flag.ContinueOnError)
	var (
		fo   flanneld.CleanupOptions
		co   cni.CleanupOptions
		logs cli.LogFlags
		stay bool
	)
	fs.StringVar(&fo.SubnetFile, "subnet-file", subnetenv.DefaultPath, "flanneld's subnet.env")
	fs.StringVar(&fo.NetConfPath, "net-config-path", manifest.NetConfPath, "net-conf.json, if still there (else the networks come from subnet.env)")
	fs.StringVar(&fo.InstallCNIConf, "install-cni-conf", manifest.CNIConfPath, "the CNI conflist flanneld installed")
	fs.StringVar(&co.BinDir, "cni-bin-dir", manifest.CNIBinDir, "where install-cni put the plugin")
	plugins := cli.StringList{}
	fs.Var(&plugins, "cni-plugins", "names the plugin was installed as, comma-separated (default nodenet,flannel); only nodenet's binaries are removed")
	fs.StringVar(&co.DataDir, "cni-data-dir", hostlocal.DefaultDataDir, "the CNI plugin's address reservations (host-local's directory)")
	fs.StringVar(&co.Network, "cni-network", "cbr0", "the CNI network name (the conflist's name)")
	fs.StringVar(&co.Bridge, "cni-bridge", cni.DefaultBridge, "the CNI plugin's bridge")
	fs.BoolVar(&co.Force, "force", false, "delete the bridge and the pods' veths even while pods are attached")
	fs.BoolVar(&stay, "stay", false, "after a successful cleanup, keep running until terminated (the cleanup DaemonSet's pods must not exit)")
	logs.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	log, err := logs.Logger("cleanup")
	if err != nil {
		return err
	}
	co.Plugins = plugins
	if len(co.Plugins) == 0 {
		co.Plugins = []string{"nodenet", "flannel"}
	}
	fo.Logger, co.Logger = log.With("part", "flanneld"), log.With("part", "cni")
	// flanneld first: its conflist going stops the runtime from calling
	// the plugin for new pods.
	fRemoved, fErr := flanneld.Cleanup(ctx, fo)
	cRemoved, cErr := cni.Cleanup(ctx, co)
	pErr := proxycmd.DefaultModes(log).CleanupAll(ctx, "", []proxy.Family{proxy.IPv4, proxy.IPv6}, log.With("part", "proxy"))
	err = errors.Join(partError("flanneld", fErr), partError("CNI plugin", cErr), partError("proxy", pErr))
	log.Info("cleanup done", "flanneldRemoved", len(fRemoved), "cniRemoved", len(cRemoved), "complete", err == nil)
	if err != nil {
		return err
	}
	if stay {
		<-ctx.Done()
	}
	return nil
}

// runFlanneldCleanup is `nodenet flanneld --cleanup`.
func runFlanneldCleanup(ctx context.Context, o flanneld.CleanupOptions) error {
	removed, err := flanneld.Cleanup(ctx, o)
	o.Logger.Info("cleanup done", "removed", len(removed), "complete", err == nil)
	return partError("flanneld", err)
}

func partError(part string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("clean up %s: %w", part, err)
}
