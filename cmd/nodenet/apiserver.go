package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"time"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/apiserver/allocator"
	"github.com/nodenet/nodenet/internal/cidrlist"
	"github.com/nodenet/nodenet/internal/cli"
	"github.com/nodenet/nodenet/internal/version"
)

func runAPIServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("apiserver", flag.ContinueOnError)
	var (
		cfg  apiserver.Config
		etcd cli.StringList
		sans cli.StringList
		logs cli.LogFlags
	)
	fs.StringVar(&cfg.DataDir, "data-dir", "/var/lib/nodenet/apiserver", "directory for embedded etcd, certificates, tokens and admin.kubeconfig")
	fs.Var(&etcd, "etcd-servers", "external etcd endpoints (comma-separated); empty = embedded etcd in --data-dir")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", "/registry", "etcd key prefix")
	fs.StringVar(&cfg.BindAddress, "bind-address", "127.0.0.1", "IP to serve HTTPS on")
	fs.IntVar(&cfg.SecurePort, "secure-port", 6443, "HTTPS port (0 = any free port)")
	fs.StringVar(&cfg.AdvertiseAddress, "advertise-address", "", "IP clients and the kubernetes Service use to reach this server (default: the bind address, or 127.0.0.1 when that is unspecified; a link-local, multicast or unspecified address is refused)")
	fs.IntVar(&cfg.InsecurePort, "insecure-port", 0, "plain-HTTP port on 127.0.0.1 without authentication (0 = off)")
	// The Service ranges are handed out address by address, so a typo in
	// them is refused rather than read as Kubernetes reads --cluster-cidr.
	cfg.ServiceClusterIPRanges = []netip.Prefix{apiserver.DefaultServiceClusterIPRange}
	fs.Var(cli.NewCIDRsFlag(&cfg.ServiceClusterIPRanges, cidrlist.Rule{OnePerFamily: true, StrictHostBits: true}), "service-cluster-ip-range", "Service ClusterIP CIDR(s): one, or two of different families for dual-stack")
	cfg.ServiceNodePortRange = apiserver.DefaultServiceNodePortRange
	fs.Var(&portRangeFlag{&cfg.ServiceNodePortRange}, "service-node-port-range", "NodePort range, `LOW-HIGH`")
	fs.StringVar(&cfg.TokenAuthFile, "token-auth-file", "", "token CSV (token,user,uid,\"groups\"); default <data-dir>/tokens.csv, created with an admin token")
	fs.Var(&sans, "tls-san", "extra DNS names or IPs for the serving certificate (repeatable)")
	fs.BoolVar(&cfg.EtcdUnsafeNoFsync, "etcd-unsafe-no-fsync", false, "embedded etcd without fsync (etcd's --unsafe-no-fsync): data survives a crash of this process, not of the machine; for clusters that do not outlive the machine")
	fs.BoolVar(&cfg.Profiling, "profiling", false, "serve Go's /debug/pprof/ to system:masters users (off by default, unlike kube-apiserver: see docs)")
	fs.IntVar(&cfg.WatchCacheSize, "watch-cache-size", 10000, "events kept per resource for resuming watches")
	fs.DurationVar(&cfg.CompactionInterval, "etcd-compaction-interval", 5*time.Minute, "how often etcd history is compacted")
	logs.Register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	log, err := logs.Logger("apiserver")
	if err != nil {
		return err
	}
	cfg.EtcdServers, cfg.TLSSANs, cfg.Logger = etcd, sans, log
	srv, err := apiserver.Start(ctx, cfg)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "\nnodenet API server is up at %s\n  kubeconfig: %s\n  try:        kubectl --kubeconfig %s get nodes\n\n", srv.URL(), srv.KubeconfigPath(), srv.KubeconfigPath())
	<-ctx.Done()
	log.Info("shutting down")
	srv.Stop()
	return nil
}

// portRangeFlag is --service-node-port-range ("30000-32767").
type portRangeFlag struct{ dst *allocator.PortRange }

func (f *portRangeFlag) String() string {
	if f == nil || f.dst == nil {
		return ""
	}
	return f.dst.String()
}

func (f *portRangeFlag) Set(v string) error {
	p, err := allocator.ParsePortRange(v)
	if err != nil {
		return err
	}
	*f.dst = p
	return nil
}

func runVersion(ctx context.Context, args []string) error {
	fmt.Printf("nodenet %s (Kubernetes API %s, %s %s)\n", version.GitVersion, version.Kubernetes, runtime.Version(), version.Info().Platform)
	return nil
}
