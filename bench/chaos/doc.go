// Command chaos is the chaos suite of issue 17: it brings up a `nodenet
// up` cluster (3 nodes, -backend host-gw or vxlan, -proxy-mode iptables by
// default), puts it under steady load and injects faults one at a time,
// then writes a Markdown report (bench/results/chaos.md) with a table
// line per fault and the end-of-suite leak audit.
//
// It is a program, not a test, as bench/kind is: it needs root, a built
// bin/nodenet and bin/nodenet-cni (the cluster's own binaries, which the
// client pods run as `nodenet loadgen`), and minutes; `make chaos` runs
// the full form and `make chaos-short` the CI form (-short: a subset of
// the faults, 10 s of churn, under 3 minutes with the cluster's start).
// Both take /tmp/nodenet-cluster.lock, as every cluster test does.
//
// Load: two client pods (node-1, node-2) run `nodenet loadgen`
// (internal/loadgen) against echo pods on every node behind one NodePort
// Service: new TCP connections to the ClusterIP and to a NodePort, long-
// lived connections through the ClusterIP, UDP request/response. The echo
// pods drain as a production server behind a Service does: a preStop
// sleep of 2 s (the agent runs preStop hooks before SIGTERM) keeps a
// deleted pod answering while every node's proxy takes its terminating
// endpoint out; without it the churn fault measured the workload's
// abrupt exits (10 % of new connections failed at 2 pods/s). Each client
// writes a JSON report per second to its container log, every failure
// with its timestamp; the suite reads the logs from the nodes' state
// directories (<dir>/nodes/<node>/pods/logs) once the faults are done and
// attributes each failure to the fault window its timestamp falls in (the
// processes share the machine's clock).
//
// Faults (faults.go, controlplane.go, diskfull.go), each on node-1 unless
// named otherwise: kill -9 of the proxy, flanneld and the agent (found by
// subcommand and network namespace inode in /proc, so another cluster's
// daemons never match), then the controller manager and the API server in
// the vpc namespace; the proxy's services chain flushed by hand
// (iptables: NODENET-SERVICES; nftables: nodenet-proxy's services);
// flanneld's route to node-2's podCIDR deleted; node-2's VXLAN FDB entry
// deleted (vxlan); node-3's host-local store moved onto a full tmpfs
// while a pod starts (the CNI error, no reservation left behind, the
// retry once space returns, the store unchanged after the pod came and
// went); the API server frozen 10 s (SIGSTOP) and then killed, with the
// LISTs and WATCHes the new process serves in its first 15 s; node-3's
// veth on the vpc bridge down for 40 s, longer than the cluster's node
// monitor grace period (the suite runs `up --node-monitor-grace-period
// 25s`), so node-3 goes NotReady, its endpoints leave the Service's ready
// set, its echo pods (which tolerate the unreachable taint 5 s, where the
// API server's default is 300 s) are evicted and their endpoints turn
// terminating, then are removed once the link is back and the node agent
// has finished the deletions; the suite then creates node-3's echo pods
// again (the note: when each happened, when node and endpoints were back);
// node-3 restarted (noderestart.go, through cluster.RestartNodeVia, the
// path of `nodenet node restart`: every process of the node and its pods
// killed, their namespaces and the node's /run removed, the node back
// with the same name; checked: the same podCIDR, its host-local store
// holding exactly its live pods' IPs, on the other nodes the route to its
// podCIDR, its FDB and VTEP neighbour entries with its current VTEP MAC,
// its eth0 neighbour entry with its kept MAC, no neighbour entry for an
// old pod IP; the note has the endpoints' dip and return); last,
// endpoint churn (-churn-rate
// pods/s, the 10 by default, each deleted 3 s after its creation,
// behind the busy Service). The CI form runs the three node daemons'
// kills, the route, the full store, the node restart and 10 s of churn.
// For each the suite records when the fault's cause ended (the daemon
// runs again), when its checks went green (the daemon's health endpoint,
// the kubelet port, the API server's /readyz, the rule or route or FDB
// entry back, the Service's endpoints back to the stable set) and, from
// the load, when the last failure happened: convergence is from the
// cause's end to the later of the two. Around each fault it also reads
// every node proxy's kubeproxy_network_programming_duration_seconds
// (programming.go; /metrics on 127.0.0.1:10249 inside the node's
// namespace) and reports what the window added: how long EndpointSlice
// changes took from the controller seeing their cause to the nodes'
// kernels, against the echo pods' 2 s drain.
//
// After the faults, audit (leaks.go) compares what the nodes hold with
// the live pods: host-local reservations, veths on cni0, pod network
// namespaces, routes into the cluster CIDR for no node's podCIDR, and
// duplicate pod IPs.
package main
