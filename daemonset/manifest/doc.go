// Package manifest renders daemonset/nodenet.yaml, the manifest that runs
// nodenet's node daemons (flanneld and the proxy, with the CNI plugin
// installed by an init container) as one privileged DaemonSet, the way
// kube-flannel.yml and kube-proxy are deployed. The objects are built with
// the k8s.io/api types from typed Options, so the checked-in file, `nodenet
// manifest` and the local cluster all come from one definition.
// RenderCleanup (`nodenet manifest --cleanup`) is the uninstall
// counterpart: the namespace and a DaemonSet whose pod runs `nodenet
// cleanup` on every node with the install's host paths.
package manifest
