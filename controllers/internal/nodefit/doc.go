// Package nodefit holds the node predicates that decide where a pod may
// run, shared by the scheduler and the DaemonSet controller so that both
// read taints, tolerations, nodeSelector and node affinity the same way
// (and the way kube-scheduler does).
package nodefit
