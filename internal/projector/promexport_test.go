package projector

// The tests scrape /metrics in-process, as the service binaries serve it.
import _ "github.com/correx/sessions/otel/promexport"
