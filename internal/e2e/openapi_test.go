package e2e_test

import (
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

// TestMain fails the run when an answer was not as described, and says how
// many answers were checked.
func TestMain(m *testing.M) {
	http.DefaultClient.Transport = apiCheck.Transport(nil)
	code := m.Run()
	fmt.Printf("api/openapi.json: %d answers and stream events checked\n", apitest.Validated())
	if err := apiCheck.Err(); err != nil {
		fmt.Fprintln(os.Stderr, "FAIL:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}
