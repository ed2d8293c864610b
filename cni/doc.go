// Package cni is the nodenet CNI plugin: the pod-side half of the node
// network. For every pod it ensures the node bridge (cni0, carrying the
// gateway address = first address of the node's pod subnet from flanneld's
// subnet.env), creates a veth pair whose host end joins the bridge and
// whose other end becomes the pod's interface, allocates the pod's
// addresses in-process (ipam/hostlocal, host-local's on-disk format) and
// returns a CNI result. It replaces upstream's flannel meta-plugin +
// bridge + host-local trio with one process and no further exec.
//
// Two configuration types are accepted: "nodenet" (bridge and IPAM keys at
// the top level) and "flannel" (upstream flannel's, with a "delegate"),
// so the binary can be installed as /opt/cni/bin/flannel under an existing
// 10-flannel.conflist, including its delegate cache in
// /var/lib/cni/flannel/<containerID> that DEL relies on.
//
// Every command is implemented for spec versions 0.3.1 to 1.1.0: ADD
// rolls back everything it did on failure; DEL is idempotent and needs no
// subnet.env; CHECK compares the kernel and the store with prevResult; GC
// removes whatever belongs to attachments the runtime no longer knows;
// STATUS reports whether ADD can work. Cleanup (`nodenet cleanup`) removes
// what the plugin left on a node when nodenet is uninstalled. Failures are *protocol.Error values
// carrying the spec's error code.
//
// The package is the plugin's logic, in three layers:
//
//   - package cni (this one): what ADD, DEL, CHECK, GC and STATUS do — the
//     configuration and its two types, address allocation, which links
//     and addresses a pod gets, names and ownership tags, rollback, the
//     reaper. Plugin implements protocol.Plugin.
//   - cni/protocol: the CNI protocol (dispatch on CNI_COMMAND, CNI_*
//     variables, version negotiation, results and error objects, the
//     configuration decoder). It knows nothing of bridges or pods.
//   - cni/kernel: the kernel work (links, addresses, routes, sysctls,
//     namespaces) in rtnetlink messages built on internal/nlmsg. It
//     decides nothing.
//
// The host side is the network namespace of the calling thread, the pod
// side is reached through sockets opened in the pod's namespace: the
// calling thread switches into it only for the moment of opening one (and
// to write the pod's DAD sysctl for IPv6). The binary opens the pod's
// socket before main starts (PreparePod), when that needs no extra thread.
//
// Speed: the pair is created, enslaved and brought up in one netlink
// request, which also reports the pod end's index; the pod side (link up,
// addresses, routes, lo) is one batch of requests in one write; the host
// veth's name derives from the attachment, so nothing needs looking up;
// address reservations recycle their files; and DEL does not wait the
// 10-20 ms the kernel takes to unregister a veth pair but cuts the pod off
// and leaves the deletion to a reaper (Plugin.Reaper, ReapDoomed), which
// deletes every cut-off pair in one request.
//
// A plugin process lives for one command, so its start-up and the first
// run of each code path count as much as the work itself. Hence the plugin
// speaks the CNI protocol itself (cni/protocol) rather than linking the
// reference library's skel and types packages, writes and reads its
// rtnetlink messages itself (cni/kernel, internal/nlmsg) rather than
// linking the netlink library and package net, decodes the usual
// configuration without reflection (protocol.Decode), and opens its few
// files without the runtime's poller; and each veth end gets a single
// queue, which makes the kernel's part of creating the pair less than half
// as long.
package cni
