// Package endpoints is the Endpoints controller: for every Service with a
// selector it keeps a core/v1 Endpoints object of the same name, for the
// tools that still read Endpoints (Prometheus service discovery, ingress
// controllers, older proxies).
//
// It mirrors the Service's EndpointSlices (those labelled
// kubernetes.io/service-name=<service>) rather than watching pods as
// upstream's Endpoints controller does. The EndpointSlice controller is
// nodenet's one place that decides which pods back a Service and whether
// they are ready; computing that a second time from pods would let the two
// views disagree (and double the pod-watching cost). Deriving Endpoints from
// slices keeps them an exact, older-format copy of what the proxies use.
//
// The mapping follows upstream's Endpoints semantics:
//
//   - only slices of the Service's primary IP family (Endpoints are
//     single-family, like upstream's);
//   - a ready endpoint (or one whose readiness is unknown) goes to
//     addresses, a not-ready one to notReadyAddresses, and a terminating,
//     not-ready one is left out (with publishNotReadyAddresses the slice
//     controller marks every endpoint ready, so those are kept, as
//     upstream keeps terminating pods of such Services);
//   - endpoints are grouped into subsets by their port set, sorted, so the
//     result does not depend on slice order;
//   - labels are the Service's, plus service.kubernetes.io/headless for
//     headless Services and endpoints.kubernetes.io/managed-by=
//     endpoint-controller;
//   - endpoints.kubernetes.io/last-change-trigger-time is the latest of the
//     slices' trigger times;
//   - beyond 1000 addresses the Endpoints are truncated (ready addresses
//     first, cut in proportion across subsets) and annotated
//     endpoints.kubernetes.io/over-capacity=truncated.
//
// A sync writes only when the subsets, labels or over-capacity annotation
// differ from what is stored, so a restart or a resync writes nothing. The
// Endpoints of a deleted Service are deleted, as upstream does; those of a
// Service that lost its selector (or became ExternalName) are deleted only
// when this controller wrote them, so users can maintain their own
// Endpoints for selector-less Services. Nothing mirrors such hand-written
// Endpoints into EndpointSlices (upstream's EndpointSliceMirroring
// controller); nodenet's proxies read slices only.
package endpoints
