package godeps

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/correx/sessions"

// The parts of docs/architecture.md, by import path under the module.
var (
	services = []string{"internal/ingest", "internal/projector", "internal/query"}
	platform = []string{"internal/config", "internal/httpx", "internal/service", "internal/auth", "internal/kafka",
		"internal/redisconn", "internal/redisconn/redisclient"}
	dataPackages = []string{"internal/redislayout", "internal/changelog", "internal/systemkey", "internal/sessionlog", "internal/archive"}
)

// paths are the import paths of the module's packages named relatively.
func paths(rel ...string) []string {
	out := make([]string, len(rel))
	for i, r := range rel {
		out[i] = module + "/" + r
	}
	return out
}

// listPackages lists the module's packages matching pattern (go list).
func listPackages(t *testing.T, pattern string) []string {
	t.Helper()
	out, err := exec.Command("go", "list", pattern).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pattern, err)
	}
	return strings.Fields(string(out))
}

// cloudSDKs are the cloud providers' SDKs, gocloud.dev (whose error
// package links gRPC) and the archive's drivers that link them
// (internal/archive/cloudblob registers them in the service binaries
// only; internal/archive/objstore implements file:// and mem:// itself).
var cloudSDKs = []string{
	"gocloud.dev",
	"google.golang.org/grpc",
	"github.com/aws",
	"cloud.google.com/go",
	"google.golang.org/api/storage",
	"google.golang.org/api/option",
	"google.golang.org/api/transport",
	"google.golang.org/api/iamcredentials",
	"golang.org/x/oauth2/google",
	"github.com/Azure",
	"gocloud.dev/aws",
	"gocloud.dev/gcp",
	"gocloud.dev/azure",
	"gocloud.dev/blob/s3blob",
	"gocloud.dev/blob/gcsblob",
	"gocloud.dev/blob/azureblob",
	"github.com/correx/sessions/internal/archive/cloudblob",
}

// otlpExporters are the OTLP exporters and the collector's generated
// services, which link gRPC (the HTTP exporters too, through their
// configuration): otel/otlpexport registers them in the service binaries
// only.
var otlpExporters = []string{
	"go.opentelemetry.io/otel/exporters/otlp",
	"go.opentelemetry.io/proto/otlp/collector",
	"github.com/correx/sessions/otel/otlpexport",
}

// prometheusExporter is the Prometheus client behind /metrics, which links
// protocol buffers: otel/promexport registers it in the service binaries
// only.
var prometheusExporter = []string{
	"github.com/prometheus",
	"go.opentelemetry.io/otel/exporters/prometheus",
	"google.golang.org/protobuf",
	"github.com/correx/sessions/otel/promexport",
	"github.com/correx/sessions/otel/internal/promreader",
}

// TestDependencyRules holds the repository's rules on what a package
// links (links) and what it imports itself (imports).
func TestDependencyRules(t *testing.T) {
	tests := []struct {
		name, pkg string
		links     Rules
		imports   Rules
	}{
		{
			// A user's test that starts the kit archives to file:// or
			// mem:// at most; the cloud SDKs are hundreds of packages and
			// dozens of lines in that user's go.mod. The kit drives the
			// stack through internal/devstack, not the projector's own
			// configuration.
			name: "pkg/testkit", pkg: "github.com/correx/sessions/pkg/testkit",
			links:   Rules{Deny: append(append(append([]string{}, cloudSDKs...), otlpExporters...), prometheusExporter...)},
			imports: Rules{Deny: []string{"github.com/correx/sessions/internal/projector"}},
		},
		{
			name: "pkg/testkit/correx", pkg: "github.com/correx/sessions/pkg/testkit/correx",
			links: Rules{Deny: cloudSDKs},
		},
		{
			// The telemetry library exports to the console by itself;
			// OTLP, and gRPC with it, and Prometheus, and protocol buffers
			// with it, are a program's choice.
			name: "otel", pkg: module + "/otel",
			links: Rules{Deny: append(append([]string{"google.golang.org/grpc"}, otlpExporters...), prometheusExporter...)},
		},
		{
			name: "internal/archive", pkg: "github.com/correx/sessions/internal/archive",
			links: Rules{Deny: append(append([]string{}, cloudSDKs...), paths(services...)...)},
		},
		// The contract: the standard library only, and nothing internal.
		{name: "pkg/fsm", pkg: module + "/pkg/fsm", links: Rules{Allow: paths("pkg/fsm")}},
		{name: "pkg/wire", pkg: module + "/pkg/wire", links: Rules{Allow: paths("pkg/wire")}},
		// The archive's buckets: file:// and mem:// with the standard
		// library alone.
		{name: "internal/archive/objstore", pkg: module + "/internal/archive/objstore", links: Rules{Allow: paths("internal/archive/objstore")}},
		// The retry schedule, which pkg/client and pkg/feed use too.
		{name: "pkg/backoff", pkg: module + "/pkg/backoff", links: Rules{Allow: paths("pkg/backoff")}},
		{
			// The Go client speaks HTTP: no Kafka, no Redis.
			name: "pkg/client", pkg: module + "/pkg/client",
			links:   Rules{Deny: []string{"github.com/twmb/franz-go", "github.com/redis/go-redis"}},
			imports: Rules{Deny: paths("internal")},
		},
		{name: "pkg/feed", pkg: module + "/pkg/feed", imports: Rules{Deny: paths("internal")}},
		// The services share no internals.
		{name: "internal/ingest", pkg: module + "/internal/ingest", links: Rules{Deny: paths("internal/projector", "internal/query")}},
		{name: "internal/projector", pkg: module + "/internal/projector", links: Rules{Deny: paths("internal/ingest", "internal/query", "internal/console")}},
		{name: "internal/query", pkg: module + "/internal/query", links: Rules{Deny: paths("internal/ingest", "internal/projector")}},
	}
	// The platform runs a service whatever it serves: no service, and
	// nothing of the read model or the users' libraries.
	for _, p := range platform {
		tests = append(tests, struct {
			name, pkg string
			links     Rules
			imports   Rules
		}{name: p, pkg: module + "/" + p, links: Rules{Deny: paths(append([]string{"pkg/snapshot", "pkg/client", "pkg/feed"}, services...)...)}})
	}
	// The data's formats and layouts serve the services, not the reverse.
	for _, p := range dataPackages[:len(dataPackages)-1] { // internal/archive has its entry above
		tests = append(tests, struct {
			name, pkg string
			links     Rules
			imports   Rules
		}{name: p, pkg: module + "/" + p, links: Rules{Deny: paths(services...)}})
	}
	t.Run("pkg/snapshot", func(t *testing.T) {
		// The read model's store uses the key layout, and nothing else
		// internal.
		var deny []string
		for _, p := range listPackages(t, "../../...") {
			if strings.HasPrefix(p, module+"/internal/") && p != module+"/internal/redislayout" {
				deny = append(deny, p)
			}
		}
		CheckImports(t, module+"/pkg/snapshot", Rules{Deny: deny})
	})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			Check(t, tt.pkg, tt.links)
			CheckImports(t, tt.pkg, tt.imports)
		})
	}
}

// TestServicesLinkTheCloudDrivers: the binaries that open an archive link
// its s3:// and gs:// drivers, so that moving them out of internal/archive
// took nothing from the services.
func TestServicesLinkTheCloudDrivers(t *testing.T) {
	for _, pkg := range []string{"cmd/projector", "cmd/query"} {
		r := &recorder{TB: t}
		Check(r, "github.com/correx/sessions/"+pkg, Rules{Deny: []string{"gocloud.dev/blob/s3blob", "gocloud.dev/blob/gcsblob"}})
		if len(r.errs) < 2 {
			t.Errorf("%s links the drivers of s3:// and gs:// no more: %q", pkg, r.errs)
		}
	}
}

// TestServicesLinkTheExporters: the binaries that set telemetry up
// link the OTLP exporters of both protocols and the Prometheus one, so that
// moving them out of correxotel took nothing from the services.
func TestServicesLinkTheExporters(t *testing.T) {
	exporters := []string{
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc",
		"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp",
		"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc",
		"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp",
		"go.opentelemetry.io/otel/exporters/prometheus",
	}
	for _, pkg := range []string{"cmd/ingest", "cmd/projector", "cmd/query", "cmd/devstack"} {
		r := &recorder{TB: t}
		Check(r, module+"/"+pkg, Rules{Deny: exporters})
		if len(r.errs) < len(exporters) {
			t.Errorf("%s links the OTLP or Prometheus exporters no more: %q", pkg, r.errs)
		}
	}
}

// maxTestkitDeps bounds the packages pkg/testkit links, the standard
// library's included (go list -deps ./pkg/testkit | wc -l): a user's test
// compiles and links every one. It was 595 with the OTLP exporters in
// correxotel, 541 since otel/otlpexport, 508 since otel/promexport, and 371
// since the archive's file:// and mem:// buckets are its own
// (internal/archive/objstore) rather than gocloud.dev's, whose errors link
// gRPC. What remains is mostly the services themselves, the broker,
// go-redis, miniredis and the OpenTelemetry SDK.
const maxTestkitDeps = 380

// TestTestkitDependencyCount holds pkg/testkit to maxTestkitDeps packages.
func TestTestkitDependencyCount(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", module+"/pkg/testkit").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	if n := len(strings.Fields(string(out))); n > maxTestkitDeps {
		t.Errorf("pkg/testkit links %d packages, more than %d: look for the dependency that brought them (go list -deps)", n, maxTestkitDeps)
	}
}

// TestArchitectureNamesEveryPackage: docs/architecture.md names every
// package of the module, so that a new one gets its place on the map.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile("../../docs/architecture.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range listPackages(t, "../../...") {
		rel := strings.TrimPrefix(strings.TrimPrefix(p, module), "/")
		if !strings.Contains(string(doc), "`"+rel+"`") {
			t.Errorf("docs/architecture.md does not name %s (as `%s`)", p, rel)
		}
	}
}
