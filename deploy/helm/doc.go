// Package helm tests the correx-sessions Helm chart in correx-sessions/ and the
// values files in values/.
//
// It is a module of its own (github.com/correx/sessions/deploy/helm) so that
// Helm and the Kubernetes API types never enter the main module's dependency
// graph. Helm is pinned as a tool dependency in go.mod; TestMain asks
// `go tool -n helm` for the binary, which builds it on the first run (a few
// minutes) and afterwards returns the copy cached in the Go build cache, so every
// later run starts at once. The tests then run that binary directly: `helm lint`
// and `helm template`, never a cluster.
//
// Every rendered document is decoded strictly (unknown fields are errors) into
// the types of k8s.io/api, or for the Prometheus Operator ServiceMonitor into a
// local struct, and checked against the chart's contract: probes, resources, the
// restricted security context, the exact CORREX_* variables of each component,
// secrets only by reference, projector replicas within the partition count, and
// the ConfigMap checksum that rolls pods when their configuration changes.
//
// The PrometheusRule (also a local struct) and the Grafana dashboard are
// checked with Prometheus' PromQL parser: every expression parses and reads
// only the release's series, and the metric names they read are those of
// chart-metrics.txt, which the main module's end-to-end tests find on the
// running services.
package helm
