// Package apiserver is nodenet's Kubernetes-compatible API server: the
// subset of kube-apiserver's API that the suite's components, kubectl and
// client-go need, served over HTTPS from objects kept in etcd (embedded by
// default, Config.EtcdServers for an external cluster). Start builds a
// Server from a Config; `nodenet apiserver` fills the Config from flags.
//
// Every served resource is one entry of the resource table (resources.go):
// names, scope, status split, defaulting, validation, field selectors and
// allocation. The request path (request.go, handler.go), discovery and
// OpenAPI are all derived from that table, so what kubectl discovers is
// exactly what is served. Storage, the watch cache, ClusterIP and NodePort
// allocation, defaulting, validation and certificates live in the
// subpackages; allocations ride in the same etcd transaction as their
// Service, so a crash leaves nothing to repair.
//
// Components talk to this server through client-go only and never import
// it (docs/ARCHITECTURE.md, "Dependency rules"); apiserver/pki is the one
// subpackage the node agent shares with it.
package apiserver
