package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/nodenet/nodenet/internal/netnsutil"
	"github.com/nodenet/nodenet/routes"
)

// Addresses of the node network (see doc.go).
const (
	vpcBridge   = "vpc0"
	vpcCIDR     = "172.30.0.0/24"
	apiIP       = "172.30.0.1"
	apiPort     = 6443
	ClusterCIDR = "10.244.0.0/16"
	ServiceCIDR = "10.96.0.0/12"
)

// Config describes a cluster. Validate (called by Up) fills in the
// defaults of empty strings and checks every field.
type Config struct {
	Name      string // namespaces are nn-<Name>-*
	Dir       string // state directory
	Nodes     int
	Backend   string // host-gw or vxlan
	ProxyMode string // the DaemonSet's proxy mode; "none" runs no proxy container
	Binary    string // the nodenet binary
	CNIBinary string // the nodenet-cni binary (the image's, mapped by the agents)
	APIPort   int    // root-namespace port of the API forwarder (0: any)
	LBPool    string // CIDR LoadBalancer Service IPs come from
	Replace   bool   // stop a live `up` of the same dir or name instead of refusing
	// NodeMonitorGracePeriod is the controller manager's: how long a node
	// may miss its heartbeats before it is NotReady (0: upstream's 40 s).
	NodeMonitorGracePeriod time.Duration
	Out                    io.Writer
	// Daemons are the node daemons' objects (daemonset/manifest's, one of
	// them the DaemonSet), applied once the API server answers.
	Daemons []runtime.Object

	portmapDir string // found by Validate
}

// State is what Up records in <dir>/cluster.json for down and status.
type State struct {
	Name       string   `json:"name"`
	Nodes      []string `json:"nodes"`
	APIPort    int      `json:"apiPort"`
	PID        int      `json:"pid"`
	StartTicks uint64   `json:"startTicks"` // of PID, see Owner
}

// Prefix is the namespace prefix of a cluster.
func Prefix(name string) string { return "nn-" + name + "-" }

// VPCNetns is the name of the vpc namespace.
func VPCNetns(name string) string { return Prefix(name) + "vpc" }

// NodeNetns is the name of node i's namespace (i from 1).
func NodeNetns(name string, i int) string { return Prefix(name) + "node-" + strconv.Itoa(i) }

// PodNetnsPrefix is what the agents of the cluster name pod namespaces with.
func PodNetnsPrefix(name string) string { return Prefix(name) + "pod-" }

// NodeName is the Kubernetes name of node i.
func NodeName(i int) string { return "node-" + strconv.Itoa(i) }

func nodeIP(i int) string { return "172.30.0." + strconv.Itoa(10+i) }

// Cluster is a running cluster.
type Cluster struct {
	cfg       Config
	comps     []*component
	apiLn     net.Listener
	AdminKube string // admin kubeconfig for the root namespace
	// ControllerKube is the controller manager's kubeconfig (inside the
	// vpc namespace, its own identity).
	ControllerKube string
	stopFwd        context.CancelFunc
	wg             sync.WaitGroup
	claim          *claim
	ids            []identity // every component's token (credentials.go)
	restartMu      sync.Mutex // one node restart at a time (restart.go)
}

func (c *Cluster) nodeDir(i int) string { return filepath.Join(c.cfg.Dir, "nodes", NodeName(i)) }

// Up builds the namespaces and the node network, starts every component
// under supervision, and returns once the API server answers. Components
// keep running until ctx ends; call Wait to tear down after that.
func Up(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cl, err := claimOrReplace(cfg)
	if err != nil {
		return nil, err
	}
	// The port is taken before anything changes: a busy port must not
	// cost a stale cluster's clean-up or a half-built network.
	ln, err := listenAPI(cfg.APIPort)
	if err != nil {
		cl.release()
		return nil, err
	}
	c := &Cluster{cfg: cfg, claim: cl, apiLn: ln}
	defer func() {
		if err != nil {
			_ = c.teardown()
		}
	}()
	// A cluster left behind by a killed up is removed first; a live one
	// cannot be here, claimOrReplace refused or stopped it.
	if err := Down(cfg.Dir, cfg.Name, true); err != nil {
		return nil, fmt.Errorf("clean previous cluster: %w", err)
	}
	for _, d := range []string{"logs", "apiserver", "bin"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	st := State{Name: cfg.Name, PID: os.Getpid(), StartTicks: cl.self.StartTicks}
	for i := 1; i <= cfg.Nodes; i++ {
		st.Nodes = append(st.Nodes, NodeName(i))
	}
	start := time.Now()
	if err := c.buildNetwork(); err != nil {
		return nil, err
	}
	Stage(cfg.Out, "namespaces", time.Since(start), fmt.Sprintf("vpc %s (bridge %s %s/24), %d node namespaces", VPCNetns(cfg.Name), vpcBridge, apiIP, cfg.Nodes))
	start = time.Now()
	if err := c.writeFiles(); err != nil {
		return nil, err
	}
	if c.ids, err = newIdentities(cfg.Nodes); err != nil {
		return nil, err
	}
	if err := writeTokenFile(c.tokenFile(), c.ids); err != nil {
		return nil, err
	}
	st.APIPort = c.apiLn.Addr().(*net.TCPAddr).Port
	b, _ := json.MarshalIndent(st, "", "  ")
	if err := os.WriteFile(filepath.Join(cfg.Dir, "cluster.json"), b, 0o644); err != nil {
		return nil, err
	}
	fctx, cancel := context.WithCancel(context.Background())
	c.stopFwd = cancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		forward(fctx, c.apiLn, netnsutil.Path(VPCNetns(cfg.Name)), net.JoinHostPort(apiIP, strconv.Itoa(apiPort)))
	}()

	c.comps = c.components()
	if err := c.serveControl(fctx); err != nil {
		fmt.Fprintf(cfg.Out, "  %v\n", err)
	}
	for _, comp := range c.comps {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); comp.supervise(ctx, cfg.Binary, cfg.Out, 10*time.Second) }()
		if comp.name == "apiserver" {
			if err := c.waitAPI(ctx, st.APIPort); err != nil {
				return c, err
			}
			Stage(cfg.Out, "control plane", time.Since(start), fmt.Sprintf("API server https://127.0.0.1:%d; admin kubeconfig %s", st.APIPort, c.AdminKube))
		}
	}
	start = time.Now()
	cs, err := Client(c.AdminKube)
	if err != nil {
		return c, err
	}
	if err := c.DeployDaemons(ctx, cs); err != nil {
		return c, err
	}
	ns, name := c.DaemonSet()
	Stage(cfg.Out, "daemonset", time.Since(start), fmt.Sprintf("applied the DaemonSet manifest (backend %s, proxy %s): the agents run flanneld and the proxy as pods of %s/%s", cfg.Backend, cfg.ProxyMode, ns, name))
	return c, nil
}

// Wait blocks until ctx (the one given to Up) ends and every component
// has stopped, then removes the namespaces. Logs are kept.
func (c *Cluster) Wait() error {
	c.wg.Add(0)
	// Components stop themselves on ctx end; the forwarder waits for us.
	c.waitComponents()
	return c.teardown()
}

func (c *Cluster) waitComponents() {
	for {
		busy := false
		for _, comp := range c.comps {
			comp.mu.Lock()
			if comp.state == "running" {
				busy = true
			}
			comp.mu.Unlock()
		}
		if !busy {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *Cluster) teardown() error {
	if c.stopFwd != nil {
		c.stopFwd()
	}
	if c.apiLn != nil {
		_ = c.apiLn.Close()
	}
	err := Down(c.cfg.Dir, c.cfg.Name, true)
	c.claim.release()
	return err
}

// StatusLines is one line per component.
func (c *Cluster) StatusLines() []string {
	var out []string
	for _, comp := range c.comps {
		out = append(out, comp.status())
	}
	return out
}

func (c *Cluster) buildNetwork() error {
	vpc := VPCNetns(c.cfg.Name)
	if _, err := netnsutil.Create(vpc); err != nil {
		return err
	}
	h, err := routes.OpenHandle(vpc)
	if err != nil {
		return err
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: vpcBridge}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("create bridge %s: %w", vpcBridge, err)
	}
	addr, _ := netlink.ParseAddr(apiIP + "/24")
	if err := h.AddrAdd(br, addr); err != nil {
		return fmt.Errorf("address bridge: %w", err)
	}
	if err := h.LinkSetUp(br); err != nil {
		return fmt.Errorf("bridge up: %w", err)
	}
	for i := 1; i <= c.cfg.Nodes; i++ {
		if err := c.addNode(h, br, i, nil); err != nil {
			return err
		}
	}
	if c.cfg.Backend == BackendAlloc {
		// The VPC router forwards between nodes of the same subnet, as a
		// cloud's does, and sends no ICMP redirects that would teach the
		// nodes to go direct.
		for _, k := range []string{"net/ipv4/ip_forward=1", "net/ipv4/conf/all/send_redirects=0", "net/ipv4/conf/" + vpcBridge + "/send_redirects=0"} {
			key, val, _ := strings.Cut(k, "=")
			if err := netnsutil.Do(netnsutil.Path(vpc), func() error { return os.WriteFile("/proc/sys/"+key, []byte(val), 0o644) }); err != nil {
				return fmt.Errorf("%s: sysctl %s: %w", vpc, key, err)
			}
		}
	}
	return nil
}

// addNode creates the node namespace and a veth whose vpc end is enslaved
// to the bridge; the veth is created inside the vpc namespace, so the root
// namespace never sees it. mac, if not nil, is eth0's address (a node
// restarted keeps its own); else the kernel picks one.
func (c *Cluster) addNode(vpc *netlink.Handle, br netlink.Link, i int, mac net.HardwareAddr) error {
	name := NodeNetns(c.cfg.Name, i)
	path, err := netnsutil.Create(name)
	if err != nil {
		return err
	}
	ns, err := netnsutil.Open(path)
	if err != nil {
		return err
	}
	defer ns.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: vethName(i), MasterIndex: br.Attrs().Index}, PeerName: "eth0", PeerHardwareAddr: mac, PeerNamespace: netlink.NsFd(ns.Fd())}
	if err := vpc.LinkAdd(veth); err != nil {
		return fmt.Errorf("create veth for %s: %w", name, err)
	}
	if err := vpc.LinkSetUp(veth); err != nil {
		return fmt.Errorf("veth up: %w", err)
	}
	h, err := routes.OpenHandle(name)
	if err != nil {
		return err
	}
	defer h.Close()
	eth, err := h.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("%s: eth0: %w", name, err)
	}
	addr, _ := netlink.ParseAddr(nodeIP(i) + "/24")
	if err := h.AddrAdd(eth, addr); err != nil {
		return fmt.Errorf("%s: address eth0: %w", name, err)
	}
	if err := h.LinkSetUp(eth); err != nil {
		return fmt.Errorf("%s: eth0 up: %w", name, err)
	}
	gw := netip.MustParseAddr(apiIP)
	if err := h.RouteAdd(&netlink.Route{LinkIndex: eth.Attrs().Index, Gw: gw.AsSlice()}); err != nil {
		return fmt.Errorf("%s: default route: %w", name, err)
	}
	// Pods reach other nodes' pods through the node namespace.
	for _, k := range []string{"net/ipv4/ip_forward"} {
		if err := ns.Do(func() error { return os.WriteFile("/proc/sys/"+k, []byte("1"), 0o644) }); err != nil {
			return fmt.Errorf("%s: sysctl %s: %w", name, k, err)
		}
	}
	return nil
}
