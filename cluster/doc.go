// Package cluster is the local multi-node cluster of network namespaces
// behind `nodenet up`, `nodenet down` and `nodenet status`.
//
// Layout (everything lives in namespaces named nn-<cluster>-*, nothing in
// the root namespace's addresses, routes or firewall changes):
//
//	nn-<c>-vpc        bridge "vpc0" 172.30.0.1/24 (the node network), the API
//	                  server (bound to 172.30.0.1:6443) and the controller
//	                  manager (node IPAM 10.244.0.0/16, EndpointSlices,
//	                  scheduler, node lifecycle, DaemonSets; with backend
//	                  alloc, cloud routes: this namespace is then the VPC
//	                  router, forwarding between nodes with one route per
//	                  node podCIDR, without ICMP redirects).
//	nn-<c>-node-<i>   eth0 172.30.0.(10+i)/24, veth peer "n<i>" on vpc0;
//	                  runs `nodenet agent`; flanneld and the proxy run as
//	                  the pods of the nodenet DaemonSet (deploy.go).
//	nn-<c>-pod-*      one per pod, created by the agent, wired by the CNI
//	                  plugin (cni0 in the node namespace).
//
// The node network is 172.30.0.0/24 (private, RFC 1918); pods use
// 10.244.0.0/16 (one /24 per node); Services 10.96.0.0/12; LoadBalancer
// Services get an IP from 172.30.0.224/28 (--lb-ip-pool).
//
// LoadBalancer traffic: the vpc namespace is the node network's router and
// its external client. As a cloud load balancer (or a BGP peer) would, it
// holds a host route per LoadBalancer IP to one node that can serve it —
// "172.30.0.225 via 172.30.0.12", kept by the controller manager's lbroutes
// controller in the vpc namespace's main table, moved when that node stops
// being Ready, and for externalTrafficPolicy Local pointed only at a node
// with a ready endpoint. The node's proxy captures the address (ipMode
// VIP) as for a NodePort. Nothing answers ARP for these addresses (no
// MetalLB-style L2 speaker): a host on vpc0 other than the router would
// not reach them, just as a host in a cloud subnet only reaches a load
// balancer through the subnet's router.
//
// The root namespace reaches the API server through a TCP forwarder that
// `nodenet up` runs: it listens on 127.0.0.1:<port> in the root namespace
// and dials from a thread switched into the vpc namespace. The admin
// kubeconfig (<dir>/admin.kubeconfig) points at 127.0.0.1; the
// components' kubeconfigs point at 172.30.0.1, each with its own identity
// from <dir>/tokens.csv (credentials.go): the controller manager's
// <dir>/controller-manager.kubeconfig and each node's
// <dir>/nodes/<node>/etc/nodenet/kubelet.kubeconfig, a system:node:<node>
// identity that the API server's node authorizer holds to its own node.
//
// One `up` owns a cluster for its whole life (flocks on <dir>/up.lock and
// /run/nodenet/<name>.lock, see owner.go): a second `up` is refused with
// how to reach and remove the running one; `down` and `up --replace` stop
// the owner, which tears its cluster down.
//
// Each component (API server, controller manager, one agent per node) is
// its own process — the nodenet binary with a subcommand, forked from a
// thread switched into the component's namespace — and is restarted when
// it exits. Logs go to <dir>/logs/<component>.log.
//
// The node daemons are deployed as on a real cluster: once the API server
// answers, `up` applies the objects of daemonset/nodenet.yaml (rendered by
// its caller with the cluster's backend and proxy mode: Config.Daemons),
// the controller manager's DaemonSet controller creates a pod per node,
// and each agent runs it — the init container installs nodenet-cni into
// the node's /opt/cni/bin, then flanneld and the proxy, their logs read
// with `kubectl logs`. `up` waits for the DaemonSet as `kubectl rollout
// status` would; pod readiness is the containers' readiness probes.
//
// `nodenet node restart NAME` restarts one node as a reboot would
// (restart.go): the `up` owning the cluster, which supervises the node's
// agent, takes the request on <dir>/up.sock (control.go, HTTP, mode 0600),
// holds the agent's supervisor, kills every process of the node and its
// pods, removes their namespaces and the node's /run (a tmpfs on a real
// host), rebuilds the node namespace with the same address and eth0 MAC
// and releases the agent, which finds its Node (same podCIDR) and its pod
// records on disk and gives the pods new sandboxes.
//
// The controller manager's --node-monitor-grace-period is Config's
// NodeMonitorGracePeriod (`up --node-monitor-grace-period`, default 40 s).
//
// Each node has a root directory, <dir>/nodes/<node>/ (the agent's
// --host-root): the DaemonSet's hostPath volumes (/run/flannel,
// /etc/cni/net.d, /opt/cni/bin, /run/xtables.lock, /lib/modules linked to
// the machine's, /sys/fs/bpf, /sys/fs/cgroup) are under it, and the agent runs the CNI
// plugins with the node's /run/flannel, /var/lib/cni and iptables lock
// bound on the real paths in a private mount namespace, so the conflist
// flanneld writes (subnetFile /run/flannel/subnet.env) means the node's
// file. The portmap plugin comes from the machine (Debian's
// containernetworking-plugins). Pods get KUBERNETES_SERVICE_HOST/PORT =
// 172.30.0.1:6443 and a service account token from TokenRequest.
//
// The nodes share one kernel, so what a real node has once per machine is
// made per node (nodemounts.go): node i's cgroup
// <cgroup v2 mount>/nodenet.slice/<name>-node-<i>, which its agent starts
// every pod process in (--pod-cgroup) and `up` binds on the node root's
// sys/fs/cgroup, and a bpffs of its own on sys/fs/bpf. The ebpf proxy of
// each node thus attaches its socket programs to its own node's pods and
// pins in its own tree, through the same hostPaths as on a real node. The
// demo's probes from a pod run in its node's cgroup, as the pod's
// processes do. Down kills what is left in the node cgroups, detaches
// every mount below the state directory before removing anything there,
// and removes the node cgroups; `up` does the same first, for a run that
// was killed.
//
// This package imports no daemon package: it only starts processes, lays
// out files and talks to the API server through client-go.
package cluster
