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

// cniTemplate is the conflist flanneld installs on every node: the nodenet
// plugin with this node's subnet.env and IPAM store.
const cniTemplate = `{
  "cniVersion": "1.0.0",
  "name": "cbr0",
  "plugins": [
    {
      "type": "nodenet",
      "subnetFile": {{json .SubnetFile}},
      "dataDir": %q,
      "bridge": "cni0",
      "isDefaultGateway": true,
      "hairpinMode": true
    }%s
  ]
}
`

const portmapEntry = `,
    {
      "type": "portmap",
      "capabilities": {"portMappings": true}
    }`

const portmapPath = "/usr/lib/cni/portmap"

func (c *Cluster) writeFiles() error {
	d := c.cfg.Dir
	netConf := fmt.Sprintf(`{"Network": %q, "Backend": {"Type": %q}}`+"\n", ClusterCIDR, c.cfg.Backend)
	if err := os.WriteFile(filepath.Join(d, "net-conf.json"), []byte(netConf), 0o644); err != nil {
		return err
	}
	cniBin := filepath.Join(d, "bin", "nodenet-cni")
	if err := copyFile(c.cfg.CNIBinary, cniBin); err != nil {
		return fmt.Errorf("install CNI plugin: %w", err)
	}
	_, err := os.Stat(portmapPath)
	havePortmap := err == nil
	for i := 1; i <= c.cfg.Nodes; i++ {
		nd := c.nodeDir(i)
		for _, sub := range []string{"etc/cni/net.d", "opt/cni/bin", "run/flannel", "var/lib/cni/networks", "var/lib/cni/cache", "pods"} {
			if err := os.MkdirAll(filepath.Join(nd, sub), 0o755); err != nil {
				return err
			}
		}
		if err := os.Symlink(cniBin, filepath.Join(nd, "opt/cni/bin/nodenet")); err != nil && !os.IsExist(err) {
			return err
		}
		pm := ""
		if havePortmap {
			pm = portmapEntry
			if err := os.Symlink(portmapPath, filepath.Join(nd, "opt/cni/bin/portmap")); err != nil && !os.IsExist(err) {
				return err
			}
		}
		tmpl := fmt.Sprintf(cniTemplate, filepath.Join(nd, "var/lib/cni/networks"), pm)
		if err := os.WriteFile(filepath.Join(nd, "cni-conf.tmpl"), []byte(tmpl), 0o644); err != nil {
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
	c.NodeKube = filepath.Join(d, "node.kubeconfig")
	c.AdminKube = filepath.Join(d, "admin.kubeconfig")
	comps := []*component{
		{name: "apiserver", netns: vpc, args: []string{"apiserver",
			"--data-dir", filepath.Join(d, "apiserver"), "--bind-address", apiIP, "--secure-port", strconv.Itoa(apiPort),
			"--advertise-address", apiIP, "--tls-san", "127.0.0.1", "--tls-san", apiIP, "--tls-san", "localhost",
			"--service-cluster-ip-range", ServiceCIDR}},
		{name: "controller-manager", netns: vpc, args: []string{"controller-manager",
			"--kubeconfig", c.NodeKube, "--cluster-cidr", ClusterCIDR, "--leader-elect=false", "--healthz-bind-address", "",
			// LoadBalancer IPs, and their routes in this (the vpc router's)
			// main table: see doc.go.
			"--lb-ip-pool", c.cfg.LBPool, "--configure-lb-routes"}},
	}
	for i := 1; i <= c.cfg.Nodes; i++ {
		nd, node := c.nodeDir(i), NodeName(i)
		ns := netnsutil.Path(NodeNetns(name, i))
		comps = append(comps,
			&component{name: node + "/agent", netns: ns, args: []string{"agent",
				"--kubeconfig", c.NodeKube, "--node-name", node, "--node-ip", nodeIP(i),
				"--zone", "zone-" + string(rune('a'+(i-1)%3)),
				"--cni-conf-dir", filepath.Join(nd, "etc/cni/net.d"), "--cni-bin-dir", filepath.Join(nd, "opt/cni/bin"),
				"--cni-cache-dir", filepath.Join(nd, "var/lib/cni/cache"), "--state-dir", filepath.Join(nd, "pods"),
				"--netns-prefix", PodNetnsPrefix(name)}},
			&component{name: node + "/flanneld", netns: ns, args: []string{"flanneld",
				"--kube-subnet-mgr", "--kubeconfig", c.NodeKube, "--node-name", node, "--iface", "eth0",
				"--net-config-path", filepath.Join(d, "net-conf.json"),
				"--subnet-file", filepath.Join(nd, "run/flannel/subnet.env"),
				"--install-cni-conf", filepath.Join(nd, "etc/cni/net.d/10-nodenet.conflist"),
				"--cni-conf-template", filepath.Join(nd, "cni-conf.tmpl"),
				"--healthz-ip", nodeIP(i), "--healthz-port", strconv.Itoa(flanneldHealthzPort)}},
		)
		if c.cfg.ProxyMode != ProxyModeNone {
			comps = append(comps, &component{name: node + "/proxy", netns: ns, args: []string{"proxy",
				"--proxy-mode", c.cfg.ProxyMode, "--kubeconfig", c.NodeKube, "--hostname-override", node,
				"--cluster-cidr", ClusterCIDR, "--metrics-bind-address", "",
				"--healthz-bind-address", net.JoinHostPort(nodeIP(i), strconv.Itoa(proxyHealthzPort))}})
		}
	}
	for _, comp := range comps {
		comp.log = logPath(d, strings.ReplaceAll(comp.name, "/", "-"))
		comp.state = "starting"
	}
	return comps
}

// waitAPI waits for the API server's kubeconfig, derives the node and admin
// kubeconfigs from it, and waits until the API answers through the
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
	if err := clientcmd.WriteToFile(*kc, c.NodeKube); err != nil {
		return err
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
