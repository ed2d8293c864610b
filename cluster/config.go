package cluster

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nodenet/nodenet/internal/cgroup2"
)

// Backends are the flannel backends a local cluster can run. With alloc
// the vpc namespace is the VPC router: the controller manager's cloud
// routes send each node's podCIDR to that node (see doc.go).
var Backends = []string{"host-gw", "vxlan", "alloc"}

// BackendAlloc is flannel's backend without routes between nodes.
const BackendAlloc = "alloc"

// ProxyModeNone runs no proxy on the nodes; every other proxy mode is
// checked by the caller against the modes `nodenet proxy` has built in.
const ProxyModeNone = "none"

// MaxNodes bounds --nodes. Node i is 172.30.0.(10+i) and gets a /24 of
// 10.244.0.0/16, so the node network, not the pod network, is the limit:
// 200 keeps the nodes in .11-.210, clear of DefaultLBPool.
const MaxNodes = 200

// DefaultLBPool is where LoadBalancer Service IPs come from: the top of
// the node network, which no node or control-plane address uses. See
// doc.go for how traffic to these addresses reaches a node.
const DefaultLBPool = "172.30.0.224/28"

// DefaultNodeMonitorGracePeriod is kube-controller-manager's default
// --node-monitor-grace-period: how long a node may go without renewing
// its lease before the controller manager marks it NotReady (Unknown).
const DefaultNodeMonitorGracePeriod = 40 * time.Second

// MinNodeMonitorGracePeriod is twice the agents' heartbeat (their lease is
// renewed every 10 s): a shorter grace would mark healthy nodes NotReady
// between two renewals.
const MinNodeMonitorGracePeriod = 20 * time.Second

// names become namespace names (nn-<name>-node-1) and appear in paths;
// a DNS label keeps them safe in both and short enough to read.
var nameRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,30}[a-z0-9])?$`)

// Validate fills in defaults and checks every field without changing
// anything on the machine, so that bad input is refused before a single
// namespace or process exists. All problems are reported at once.
func (c *Config) Validate() error {
	c.Name = cmpOr(c.Name, "local")
	c.Backend = cmpOr(c.Backend, Backends[0])
	c.ProxyMode = cmpOr(c.ProxyMode, "iptables")
	c.LBPool = cmpOr(c.LBPool, DefaultLBPool)
	if c.NodeMonitorGracePeriod == 0 {
		c.NodeMonitorGracePeriod = DefaultNodeMonitorGracePeriod
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
	var errs []error
	if !nameRE.MatchString(c.Name) {
		errs = append(errs, fmt.Errorf("--name %q: want 1-32 lowercase letters, digits or '-', starting and ending with a letter or digit", c.Name))
	}
	if c.Nodes < 1 || c.Nodes > MaxNodes {
		errs = append(errs, fmt.Errorf("--nodes %d: want 1 to %d", c.Nodes, MaxNodes))
	}
	if !slices.Contains(Backends, c.Backend) {
		errs = append(errs, fmt.Errorf("--backend %q: want one of %s", c.Backend, strings.Join(Backends, ", ")))
	}
	if c.NodeMonitorGracePeriod < MinNodeMonitorGracePeriod {
		errs = append(errs, fmt.Errorf("--node-monitor-grace-period %s: want at least %s (twice the agents' 10 s heartbeat)", c.NodeMonitorGracePeriod, MinNodeMonitorGracePeriod))
	}
	if c.APIPort < 0 || c.APIPort > 65535 {
		errs = append(errs, fmt.Errorf("--api-port %d: want 1-65535, or 0 for any free port", c.APIPort))
	}
	if err := checkExecutable(c.Binary); err != nil {
		errs = append(errs, fmt.Errorf("nodenet binary: %w", err))
	}
	if err := checkExecutable(c.CNIBinary); err != nil {
		errs = append(errs, fmt.Errorf("--cni-plugin: %w (build it with: make build, or CGO_ENABLED=0 go build -o %s ./cmd/nodenet-cni)", err, c.CNIBinary))
	}
	// Each node's pods run in a node cgroup (nodemounts.go).
	if _, err := cgroup2.Mount(); err != nil {
		errs = append(errs, fmt.Errorf("node cgroups: %w", err))
	}
	if d, err := findPortmap(); err != nil {
		errs = append(errs, err)
	} else {
		c.portmapDir = d
	}
	if c.daemonSet() == nil {
		errs = append(errs, errors.New("no DaemonSet among the node daemon objects (render them with daemonset/manifest)"))
	}
	if err := c.checkLBPool(); err != nil {
		errs = append(errs, err)
	}
	if err := c.checkDir(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func checkExecutable(path string) error {
	if path == "" {
		return errors.New("not given")
	}
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}

// checkLBPool accepts an IPv4 CIDR that collides with nothing the cluster
// routes elsewhere: pods, Services, the nodes and the API server, and the
// node network's own network and broadcast addresses.
func (c *Config) checkLBPool() error {
	p, err := netip.ParsePrefix(c.LBPool)
	if err != nil {
		return fmt.Errorf("--lb-ip-pool %q: want an IPv4 CIDR such as %s: %w", c.LBPool, DefaultLBPool, err)
	}
	if !p.Addr().Is4() {
		return fmt.Errorf("--lb-ip-pool %s: the local cluster is IPv4-only, want an IPv4 CIDR such as %s", p, DefaultLBPool)
	}
	if p != p.Masked() {
		return fmt.Errorf("--lb-ip-pool %s: host bits set (did you mean %s?)", p, p.Masked())
	}
	for _, r := range []struct{ what, cidr string }{{"the pod network", ClusterCIDR}, {"the Service network", ServiceCIDR}, {"loopback", "127.0.0.0/8"}} {
		if q := netip.MustParsePrefix(r.cidr); p.Overlaps(q) {
			return fmt.Errorf("--lb-ip-pool %s overlaps %s %s", p, r.what, q)
		}
	}
	vpc := netip.MustParsePrefix(vpcCIDR)
	reserved := []struct {
		what string
		addr netip.Addr
	}{
		{"the node network's address", vpc.Addr()},
		{"the node network's broadcast address", netip.MustParseAddr("172.30.0.255")},
		{"the API server (vpc router)", netip.MustParseAddr(apiIP)},
	}
	for i := 1; i <= min(c.Nodes, MaxNodes); i++ {
		reserved = append(reserved, struct {
			what string
			addr netip.Addr
		}{NodeName(i), netip.MustParseAddr(nodeIP(i))})
	}
	for _, r := range reserved {
		if p.Contains(r.addr) {
			return fmt.Errorf("--lb-ip-pool %s contains %s (%s); nodes use 172.30.0.11-%s, pick a range above them such as %s", p, r.addr, r.what, nodeIP(max(c.Nodes, 1)), DefaultLBPool)
		}
	}
	return nil
}

// lockFile in the state directory is held by the `up` that owns it (see
// owner.go).
const lockFile = "up.lock"

// ownEntries are what a state directory holds once nodenet used it; a
// directory with any of them (or empty) is one `up` and `down` may clear.
var ownEntries = []string{"cluster.json", lockFile}

// checkDir refuses a state directory that holds someone else's files:
// up and down delete the directory's contents, so a typo such as
// --dir $HOME must not get that far.
func (c *Config) checkDir() error {
	if c.Dir == "" {
		return errors.New("--dir: a state directory is required")
	}
	abs, err := filepath.Abs(c.Dir)
	if err != nil {
		return fmt.Errorf("--dir %s: %w", c.Dir, err)
	}
	c.Dir = abs
	ents, err := os.ReadDir(abs)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("--dir %s: %w", abs, err)
	}
	var foreign []string
	for _, e := range ents {
		if slices.Contains(ownEntries, e.Name()) {
			return nil
		}
		if e.Name() != "logs" {
			foreign = append(foreign, e.Name())
		}
	}
	if len(foreign) > 0 {
		if len(foreign) > 3 {
			foreign = append(foreign[:3], "…")
		}
		return fmt.Errorf("--dir %s is not a nodenet state directory (it holds %s); up and down clear a state directory, so they only take a new, empty or nodenet-made one", abs, strings.Join(foreign, ", "))
	}
	return nil
}
