package client

import (
	"testing"

	"github.com/correx/sessions/internal/godeps"
)

// TestDependencies keeps the client an HTTP client: it links no Kafka or
// Redis client and no OpenTelemetry SDK or exporter, only what is written
// below. The change record and positions come from pkg/wire, which
// imports only the standard library.
func TestDependencies(t *testing.T) {
	godeps.Check(t, "github.com/correx/sessions/pkg/client", godeps.Rules{
		Allow: []string{
			"github.com/correx/sessions/pkg/client",
			"github.com/correx/sessions/pkg/wire",
			"github.com/correx/sessions/pkg/fsm",     // ValidSessionID, the event types
			"github.com/correx/sessions/pkg/backoff", // the retry schedule, standard library only
			"github.com/google/uuid",                 // event ids (UUIDv7)
			// The transport is traced (README): otelhttp and the
			// OpenTelemetry API it needs. A caller installs an SDK, or none.
			"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp",
			"go.opentelemetry.io/otel",
			"go.opentelemetry.io/auto/sdk", // go.opentelemetry.io/otel/trace's, stdlib and the API only
			"github.com/felixge/httpsnoop",
			"github.com/go-logr/logr",
			"github.com/go-logr/stdr",
			"github.com/cespare/xxhash/v2",
		},
		Deny: []string{
			"github.com/twmb/franz-go",
			"github.com/redis/go-redis",
			"go.opentelemetry.io/otel/sdk",
			"go.opentelemetry.io/otel/exporters",
		},
	})
}
