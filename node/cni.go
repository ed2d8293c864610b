package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	cnitypes "github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
)

const podIfName = "eth0"

// cniRuntime calls the node's network through libcni, as containerd does.
type cniRuntime struct {
	confDir  string
	binDirs  []string
	cacheDir string
	// exec runs the plugins; nil is libcni's default (see cniview.go).
	exec invoke.Exec
}

// errNetworkNotReady means no conflist is installed yet (flanneld has not
// published the node's subnet).
var errNetworkNotReady = errors.New("network plugin not ready: no CNI conflist installed yet")

// confList loads the first *.conflist in the conf dir, in name order.
func (c *cniRuntime) confList() (*libcni.NetworkConfigList, error) {
	files, _ := filepath.Glob(filepath.Join(c.confDir, "*.conflist"))
	sort.Strings(files)
	if len(files) == 0 {
		return nil, errNetworkNotReady
	}
	l, err := libcni.ConfListFromFile(files[0])
	if err != nil {
		return nil, fmt.Errorf("load %s: %w", files[0], err)
	}
	return l, nil
}

func (c *cniRuntime) lib() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir(c.binDirs, c.cacheDir, c.exec)
}

func runtimeConf(pod *corev1.Pod, id, nsPath string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{
		ContainerID: id, NetNS: nsPath, IfName: podIfName,
		Args: [][2]string{
			{"IgnoreUnknown", "1"},
			{"K8S_POD_NAMESPACE", pod.Namespace},
			{"K8S_POD_NAME", pod.Name},
			{"K8S_POD_INFRA_CONTAINER_ID", id},
			{"K8S_POD_UID", string(pod.UID)},
		},
	}
	var pms []map[string]any
	for _, ctr := range pod.Spec.Containers {
		for _, p := range ctr.Ports {
			if p.HostPort == 0 {
				continue
			}
			proto := strings.ToLower(string(p.Protocol))
			if proto == "" {
				proto = "tcp"
			}
			pms = append(pms, map[string]any{"hostPort": p.HostPort, "containerPort": p.ContainerPort, "protocol": proto, "hostIP": p.HostIP})
		}
	}
	if len(pms) > 0 {
		rt.CapabilityArgs = map[string]any{"portMappings": pms}
	}
	return rt
}

// add attaches the pod namespace and returns its IPs.
func (c *cniRuntime) add(ctx context.Context, pod *corev1.Pod, id, nsPath string) ([]string, error) {
	l, err := c.confList()
	if err != nil {
		return nil, err
	}
	res, err := c.lib().AddNetworkList(ctx, l, runtimeConf(pod, id, nsPath))
	if err != nil {
		return nil, fmt.Errorf("CNI ADD: %w", err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil {
		return nil, fmt.Errorf("CNI result: %w", err)
	}
	var ips []string
	for _, ip := range r.IPs {
		ips = append(ips, ip.Address.IP.String())
	}
	if len(ips) == 0 {
		return nil, errors.New("CNI ADD returned no IP")
	}
	return ips, nil
}

// del detaches; a missing namespace is fine (the plugin still frees the IP).
func (c *cniRuntime) del(ctx context.Context, pod *corev1.Pod, id, nsPath string) error {
	l, err := c.confList()
	if err != nil {
		return err
	}
	if _, err := os.Stat(nsPath); err != nil {
		nsPath = ""
	}
	if err := c.lib().DelNetworkList(ctx, l, runtimeConf(pod, id, nsPath)); err != nil {
		return fmt.Errorf("CNI DEL: %w", err)
	}
	return nil
}

// gc releases every attachment but the live ones.
func (c *cniRuntime) gc(ctx context.Context, live []string) error {
	l, err := c.confList()
	if err != nil {
		return err
	}
	args := &libcni.GCArgs{}
	for _, id := range live {
		args.ValidAttachments = append(args.ValidAttachments, cnitypes.GCAttachment{ContainerID: id, IfName: podIfName})
	}
	return c.lib().GCNetworkList(ctx, l, args)
}
