package correxotel

// For the external tests (otlp_test.go), which import otel/otlpexport.
var (
	EnvMap      = envMap
	CountEvents = countEvents
)

// Exporters returns the labels of the exporters t was built with.
func Exporters(t *Telemetry) []string { return t.exporters }
