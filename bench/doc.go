// Package bench is the performance harness of nodenet: it starts the real
// `nodenet apiserver` as a separate process (built from ./cmd/nodenet into a
// temp dir, embedded etcd in a temp data dir), drives it with client-go from
// the harness process, and measures what the server does under load.
//
// What lives here:
//
//   - server.go: building the binary, starting and stopping the server
//     process (SIGTERM, then SIGKILL of its process group; the temp dir is
//     removed), and reading its memory (VmRSS/VmHWM from /proc/<pid>/status,
//     Go heap and process RSS from its /metrics).
//   - scenarios.go: the scenarios — bulk create of Services and
//     EndpointSlices, list latency (etcd, watch cache, paged) and watch
//     fan-out latency — each returning plain numbers.
//   - stats.go: percentiles and formatting.
//   - apiserver_bench_test.go: the Go benchmarks that run the scenarios at
//     full scale and report their figures with b.ReportMetric.
//   - harness_test.go: TestHarnessSmoke, which runs every scenario at tiny
//     scale so that `go test ./...` checks the harness itself.
//
// Performance targets live in these benchmarks, never in timed unit tests.
// README.md in this directory explains each scenario and how to reproduce
// the figures.
package bench
