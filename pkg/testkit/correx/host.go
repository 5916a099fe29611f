package correx

import (
	"os"
	"strings"
)

// hostOverride returns the value TESTCONTAINERS_HOST_OVERRIDE should take,
// or "" to leave it as it is: "127.0.0.1" when it is unset and the engine is
// local (DOCKER_HOST unset or unix://), where the engine publishes ports.
// testcontainers' own guess, taken when the process looks containerised
// (/.dockerenv exists, as on machines built from an image), is the default
// route's gateway, which the process may not reach. A remote engine, and a
// test run in a container beside the engine with its socket mounted, must
// set the variable themselves.
func hostOverride(getenv func(string) string) string {
	if getenv("TESTCONTAINERS_HOST_OVERRIDE") != "" {
		return ""
	}
	if h := getenv("DOCKER_HOST"); h != "" && !strings.HasPrefix(h, "unix://") {
		return ""
	}
	return "127.0.0.1"
}

// setHostOverride sets TESTCONTAINERS_HOST_OVERRIDE for the process as
// hostOverride says: testcontainers reads it from the environment when it
// first needs a container's host, and nowhere else.
func setHostOverride() {
	if v := hostOverride(os.Getenv); v != "" {
		_ = os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", v)
	}
}
