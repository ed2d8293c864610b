package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/nodenet/nodenet/apiserver"
	"github.com/nodenet/nodenet/internal/version"
)

func runAPIServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("apiserver", flag.ContinueOnError)
	var (
		cfg       apiserver.Config
		etcd      stringList
		svcRanges stringList
		sans      stringList
		logs      logFlags
	)
	fs.StringVar(&cfg.DataDir, "data-dir", "/var/lib/nodenet/apiserver", "directory for embedded etcd, certificates, tokens and admin.kubeconfig")
	fs.Var(&etcd, "etcd-servers", "external etcd endpoints (comma-separated); empty = embedded etcd in --data-dir")
	fs.StringVar(&cfg.EtcdPrefix, "etcd-prefix", "/registry", "etcd key prefix")
	fs.StringVar(&cfg.BindAddress, "bind-address", "127.0.0.1", "IP to serve HTTPS on")
	fs.IntVar(&cfg.SecurePort, "secure-port", 6443, "HTTPS port (0 = any free port)")
	fs.StringVar(&cfg.AdvertiseAddress, "advertise-address", "", "IP clients and the kubernetes Service use to reach this server (default: the bind address, or 127.0.0.1 when that is unspecified; a link-local, multicast or unspecified address is refused)")
	fs.IntVar(&cfg.InsecurePort, "insecure-port", 0, "plain-HTTP port on 127.0.0.1 without authentication (0 = off)")
	fs.Var(&svcRanges, "service-cluster-ip-range", "Service ClusterIP CIDR(s): one, or two of different families for dual-stack (default 10.96.0.0/12)")
	fs.StringVar(&cfg.ServiceNodePortRange, "service-node-port-range", "30000-32767", "NodePort range")
	fs.StringVar(&cfg.TokenAuthFile, "token-auth-file", "", "token CSV (token,user,uid,\"groups\"); default <data-dir>/tokens.csv, created with an admin token")
	fs.Var(&sans, "tls-san", "extra DNS names or IPs for the serving certificate (repeatable)")
	fs.IntVar(&cfg.WatchCacheSize, "watch-cache-size", 10000, "events kept per resource for resuming watches")
	fs.DurationVar(&cfg.CompactionInterval, "etcd-compaction-interval", 5*time.Minute, "how often etcd history is compacted")
	logs.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	log, err := logs.logger("apiserver")
	if err != nil {
		return err
	}
	cfg.EtcdServers, cfg.ServiceClusterIPRanges, cfg.TLSSANs, cfg.Logger = etcd, svcRanges, sans, log
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

func runVersion(ctx context.Context, args []string) error {
	fmt.Printf("nodenet %s (Kubernetes API %s, %s %s)\n", version.GitVersion, version.Kubernetes, runtime.Version(), version.Info().Platform)
	return nil
}
