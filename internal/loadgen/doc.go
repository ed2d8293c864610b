// Package loadgen is the steady load the chaos suite (bench/chaos) runs
// from client pods while it injects faults: `nodenet loadgen`.
//
// Three kinds of traffic, all against `nodenet echo` servers:
//
//   - new TCP connections at a fixed rate to each named target (a
//     ClusterIP and a NodePort): dial, one line, its echo, close;
//   - long-lived TCP connections exchanging a line every interval; one
//     that errs or stays silent past the timeout is counted broken and
//     redialled;
//   - UDP request/response at a fixed rate, one fresh socket per request
//     as a DNS stub resolver does; a reply missing after the timeout is
//     lost.
//
// Every failure is reported with its own timestamp, and every second a
// Report (one JSON line) carries the attempts of that second per kind, so
// the harness can compute failure rates for any time window from the pod's
// log alone. Timestamps are Unix milliseconds of the machine's clock, which
// the harness shares.
package loadgen
