package e2e_test

import (
	"flag"
	"fmt"
	"net/http"
	"os"
	"testing"

	"github.com/correx/sessions/api/apitest"
)

// apiCheck checks every answer the tests' HTTP clients receive against the
// API's description (api/openapi.json): http.DefaultClient's (and so
// http.Get's), the clients the tests build (their transports are wrapped
// with apiCheck.Transport) and loadgen's. The stacks' own clients
// (pkg/testkit) are checked by the stack, which fails the test that
// started it.
var apiCheck = func() *apitest.Validator {
	v, err := apitest.New()
	if err != nil {
		panic(err)
	}
	return v
}()

// TestMain builds the service binaries once for the tests that run them as
// processes (binaries_test.go), fails the run when an answer was not as
// described, and says how many answers were checked.
func TestMain(m *testing.M) {
	flag.Parse()
	http.DefaultClient.Transport = apiCheck.Transport(nil)
	cleanup := startBuild()
	code := m.Run()
	cleanup()
	fmt.Printf("api/openapi.json: %d answers and stream events checked\n", apitest.Validated())
	if err := apiCheck.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}
