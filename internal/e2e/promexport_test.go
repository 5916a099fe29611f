package e2e_test

// Some tests run the services in-process and scrape /metrics, as the
// service binaries serve it.
import _ "github.com/correx/sessions/otel/promexport"
