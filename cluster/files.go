package cluster

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/nodenet/nodenet/internal/netnsutil"
)

// controlPlaneNice is the API server's and controller manager's CPU
// priority. A real cluster runs them on machines of their own; here they
// share two cores with every node's pod churn, whose process starts (shim,
// CNI plugins, the pods' own) at ten pods a second took every core and
// starved embedded etcd until its requests timed out (5 s).
const controlPlaneNice = -10

// portmapDirs are where Debian (containernetworking-plugins) and the
// upstream tarball put the portmap plugin; the agents search the first
// that has it after the node's own /opt/cni/bin.
var portmapDirs = []string{"/usr/lib/cni", "/opt/cni/bin"}

func findPortmap() (string, error) {
	for _, d := range portmapDirs {
		if err := checkExecutable(filepath.Join(d, "portmap")); err == nil {
			return d, nil
		}
	}
	return "", errNoPortmap
}

// nodeRootDirs are the node's own copies of the host paths the
// DaemonSet's hostPath volumes and the CNI plugins use (see doc.go).
var nodeRootDirs = []string{"etc/cni/net.d", "opt/cni/bin", "run/flannel", "var/lib/cni/networks", "var/lib/cni/cache", "pods"}

// writeFiles lays out each node's root directory, its sys/fs/cgroup and
// sys/fs/bpf mounts too (mountNode). /lib/modules is the
// machine's (read-only in the pods, as on a real host); the iptables lock
// is the node's own, shared by its proxy and its portmap plugin, since
// each node is a network namespace of its own.
func (c *Cluster) writeFiles() error {
	for i := 1; i <= c.cfg.Nodes; i++ {
		nd := c.nodeDir(i)
		for _, sub := range nodeRootDirs {
			if err := os.MkdirAll(filepath.Join(nd, sub), 0o755); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(filepath.Join(nd, "lib"), 0o755); err != nil {
			return err
		}
		// A machine without modules (a kernel with everything built in)
		// has no /lib/modules: the node gets an empty directory.
		mods := filepath.Join(nd, "lib/modules")
		if _, err := os.Stat("/lib/modules"); err == nil {
			err = os.Symlink("/lib/modules", mods)
			if err != nil && !os.IsExist(err) {
				return err
			}
		} else if err := os.MkdirAll(mods, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(nd, "run/xtables.lock"), nil, 0o600); err != nil {
			return err
		}
		if err := c.mountNode(i); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp := dst + ".tmp"
	out, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, dst)
}

func (c *Cluster) components() []*component {
	d, name := c.cfg.Dir, c.cfg.Name
	vpc := netnsutil.Path(VPCNetns(name))
	c.ControllerKube = filepath.Join(d, "controller-manager.kubeconfig")
	c.AdminKube = filepath.Join(d, "admin.kubeconfig")
	comps := []*component{
		{name: "apiserver", netns: vpc, args: []string{"apiserver",
			"--data-dir", filepath.Join(d, "apiserver"), "--bind-address", apiIP, "--secure-port", strconv.Itoa(apiPort),
			"--advertise-address", apiIP, "--tls-san", "127.0.0.1", "--tls-san", apiIP, "--tls-san", "localhost",
			"--service-cluster-ip-range", ServiceCIDR, "--token-auth-file", c.tokenFile(),
			// A development cluster: profiles for its admin, and etcd
			// without fsync, since the cluster (network namespaces) does
			// not outlive the machine and etcd shares its one disk with
			// every node's pods (see apiserver.Config.EtcdUnsafeNoFsync).
			"--profiling", "--etcd-unsafe-no-fsync"},
			nice: controlPlaneNice},
		{name: "controller-manager", netns: vpc, args: []string{"controller-manager",
			"--kubeconfig", c.ControllerKube, "--cluster-cidr", ClusterCIDR, "--leader-elect=false", "--healthz-bind-address", "",
			"--node-monitor-grace-period", c.cfg.NodeMonitorGracePeriod.String(),
			// LoadBalancer IPs, and their routes in this (the vpc router's)
			// main table: see doc.go.
			"--lb-ip-pool", c.cfg.LBPool, "--configure-lb-routes"},
			nice: controlPlaneNice},
	}
	if c.cfg.Backend == BackendAlloc {
		// The vpc router's table gets one route per node podCIDR.
		cm := comps[1]
		cm.args = append(cm.args, "--configure-cloud-routes")
	}
	for i := 1; i <= c.cfg.Nodes; i++ {
		nd, node := c.nodeDir(i), NodeName(i)
		ns := netnsutil.Path(NodeNetns(name, i))
		// Validate found the cgroup v2 mount, so this cannot fail here.
		cg, _ := NodeCgroup(name, i)
		comps = append(comps, &component{name: node + "/agent", netns: ns, args: []string{"agent",
			"--kubeconfig", c.NodeKubeconfig(i), "--node-name", node, "--node-ip", nodeIP(i),
			"--zone", "zone-" + string(rune('a'+(i-1)%3)),
			"--host-root", nd, "--nodenet-cni", c.cfg.CNIBinary, "--pod-api-server", net.JoinHostPort(apiIP, strconv.Itoa(apiPort)),
			"--cni-conf-dir", filepath.Join(nd, "etc/cni/net.d"),
			"--cni-bin-dir", filepath.Join(nd, "opt/cni/bin"), "--cni-bin-dir", c.cfg.portmapDir,
			"--cni-cache-dir", filepath.Join(nd, "var/lib/cni/cache"), "--state-dir", filepath.Join(nd, "pods"),
			"--netns-prefix", PodNetnsPrefix(name), "--pod-cgroup", cg}})
	}
	for _, comp := range comps {
		comp.log = logPath(d, strings.ReplaceAll(comp.name, "/", "-"))
		comp.state = "starting"
	}
	return comps
}

// waitAPI waits for the API server's kubeconfig, derives every
// component's kubeconfig (each with its own identity, credentials.go) and
// the admin's from it, and waits until the API answers through the
// forwarder.
func (c *Cluster) waitAPI(ctx context.Context, port int) error {
	src := filepath.Join(c.cfg.Dir, "apiserver", "admin.kubeconfig")
	deadline := time.Now().Add(90 * time.Second)
	for {
		if _, err := os.Stat(src); err == nil {
			break
		}
		if err := sleepUntil(ctx, deadline, "the API server's kubeconfig "+src); err != nil {
			return err
		}
	}
	kc, err := clientcmd.LoadFromFile(src)
	if err != nil {
		return fmt.Errorf("load %s: %w", src, err)
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + net.JoinHostPort(apiIP, strconv.Itoa(apiPort))
	}
	for _, id := range c.ids {
		path := ""
		switch {
		case id.node > 0:
			path = c.NodeKubeconfig(id.node)
		case id.user == "system:kube-controller-manager":
			path = c.ControllerKube
		default:
			continue
		}
		if err := writeKubeconfig(kc, id.token, id.user, path); err != nil {
			return err
		}
	}
	for _, cl := range kc.Clusters {
		cl.Server = "https://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	if err := clientcmd.WriteToFile(*kc, c.AdminKube); err != nil {
		return err
	}
	cs, err := Client(c.AdminKube)
	if err != nil {
		return err
	}
	for {
		if _, err := cs.Discovery().ServerVersion(); err == nil {
			return nil
		}
		if err := sleepUntil(ctx, deadline, "the API server"); err != nil {
			return err
		}
	}
}

func sleepUntil(ctx context.Context, deadline time.Time, what string) error {
	if time.Now().After(deadline) {
		return fmt.Errorf("timed out waiting for %s", what)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(200 * time.Millisecond):
		return nil
	}
}

// Client is a clientset for a kubeconfig.
func Client(kubeconfig string) (*kubernetes.Clientset, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", kubeconfig, err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	return kubernetes.NewForConfig(cfg)
}

// forward accepts on ln (root namespace) and dials target from a thread in
// the namespace at nsPath, copying bytes both ways.
func forward(ctx context.Context, ln net.Listener, nsPath, target string) {
	go func() { <-ctx.Done(); _ = ln.Close() }()
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			var up net.Conn
			err := netnsutil.Do(nsPath, func() error {
				var err error
				up, err = net.DialTimeout("tcp", target, 5*time.Second)
				return err
			})
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, conn); done <- struct{}{} }()
			go func() { _, _ = io.Copy(conn, up); done <- struct{}{} }()
			select {
			case <-done:
			case <-ctx.Done():
			}
		}()
	}
}
