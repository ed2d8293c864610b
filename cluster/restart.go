package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nodenet/nodenet/routes"
)

// NodeRestart is what RestartNode did.
type NodeRestart struct {
	Node string `json:"node"`
	// PodNetns are the pod namespaces removed with the node's.
	PodNetns []string      `json:"podNetns"`
	MAC      string        `json:"mac"` // eth0's, kept across the restart
	Took     time.Duration `json:"took"`
}

// nodeIndex is i for the cluster's node named name.
func (c *Cluster) nodeIndex(name string) (int, error) {
	for i := 1; i <= c.cfg.Nodes; i++ {
		if NodeName(i) == name {
			return i, nil
		}
	}
	return 0, fmt.Errorf("%w %q in cluster %s (nodes %s to %s)", errNoNode, name, c.cfg.Name, NodeName(1), NodeName(c.cfg.Nodes))
}

var errNoNode = errors.New("no node")

// ErrRestartBusy is returned while another node restart is under way.
var ErrRestartBusy = errors.New("a node restart is already under way")

// RestartNode restarts a node as a machine reboot would: its cable is
// pulled (the vpc end of its veth removed), every process in the node's
// namespace and its pods' namespaces is killed with SIGKILL (the agent,
// the DaemonSet's daemons, the pods), those namespaces are removed, and
// what a reboot loses goes with them: the node's /run (flanneld's
// subnet.env; the iptables lock is recreated empty). What a disk keeps
// stays: the agent's pod records and container logs, the host-local
// store, the CNI conflist and binaries. Then the node comes back with the
// same name, address and eth0 MAC (a rebooted machine keeps its NIC), and
// the agent is started again; it registers, finds its Node (the same
// podCIDR) and its pods, and gives them new sandboxes.
// The agent's supervisor does not restart it in between (component.hold).
// RestartNode returns once the node's network is back and the agent is
// started, not when its pods run again.
func (c *Cluster) RestartNode(ctx context.Context, name string) (NodeRestart, error) {
	r := NodeRestart{Node: name}
	i, err := c.nodeIndex(name)
	if err != nil {
		return r, err
	}
	if !c.restartMu.TryLock() {
		return r, ErrRestartBusy
	}
	defer c.restartMu.Unlock()
	var agent *component
	for _, comp := range c.comps {
		if comp.name == name+"/agent" {
			agent = comp
		}
	}
	if agent == nil {
		return r, fmt.Errorf("node %s has no agent component", name)
	}
	start := time.Now()
	nodeNS := NodeNetns(c.cfg.Name, i)
	mac, err := eth0MAC(nodeNS)
	if err != nil {
		return r, err
	}
	r.MAC = mac.String()
	r.PodNetns, err = podNamespaces(filepath.Join(c.nodeDir(i), "pods"))
	if err != nil {
		return r, err
	}
	agent.hold()
	defer agent.release()

	vpc, err := routes.OpenHandle(VPCNetns(c.cfg.Name))
	if err != nil {
		return r, err
	}
	defer vpc.Close()
	if l, err := vpc.LinkByName(vethName(i)); err == nil {
		if err := vpc.LinkDel(l); err != nil {
			return r, fmt.Errorf("pull %s's cable (delete %s): %w", name, vethName(i), err)
		}
	}
	if err := removeNetns(append([]string{nodeNS}, r.PodNetns...)); err != nil {
		return r, fmt.Errorf("restart %s: %w", name, err)
	}
	if err := c.resetVolatile(i); err != nil {
		return r, fmt.Errorf("restart %s: %w", name, err)
	}
	br, err := vpc.LinkByName(vpcBridge)
	if err != nil {
		return r, fmt.Errorf("restart %s: bridge %s: %w", name, vpcBridge, err)
	}
	if err := c.addNode(vpc, br, i, mac); err != nil {
		return r, fmt.Errorf("restart %s: bring the node back: %w", name, err)
	}
	r.Took = time.Since(start)
	return r, nil
}

// resetVolatile empties what a reboot clears on node i: its /run, a
// tmpfs on a real host.
func (c *Cluster) resetVolatile(i int) error {
	run := filepath.Join(c.nodeDir(i), "run")
	if err := os.RemoveAll(run); err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(run, "flannel"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(run, "xtables.lock"), nil, 0o600)
}

func eth0MAC(netns string) (net.HardwareAddr, error) {
	h, err := routes.OpenHandle(netns)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	l, err := h.LinkByName("eth0")
	if err != nil {
		return nil, fmt.Errorf("%s: eth0: %w", netns, err)
	}
	return l.Attrs().HardwareAddr, nil
}

// podNamespaces are the pod namespaces the node's agent recorded in its
// per-pod state (<state-dir>/<uid>.json, node/state.go: "netns").
func podNamespaces(stateDir string) ([]string, error) {
	files, err := filepath.Glob(filepath.Join(stateDir, "*.json"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, fmt.Errorf("read the agent's pod record: %w", err)
		}
		var rec struct {
			Netns string `json:"netns"`
		}
		if err := json.Unmarshal(b, &rec); err != nil {
			return nil, fmt.Errorf("pod record %s: %w", f, err)
		}
		if rec.Netns != "" {
			out = append(out, rec.Netns)
		}
	}
	return out, nil
}

func vethName(i int) string { return "n" + strconv.Itoa(i) }
