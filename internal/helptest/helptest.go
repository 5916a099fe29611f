// Package helptest holds what every command's -h must print, for the
// commands' tests: the usage, exit 0, no error line and no empty default.
package helptest

import (
	"strings"
	"testing"
)

// Check fails t unless err is nil (-h succeeds) and out, what -h printed,
// is the usage of the command name, without flag's "help requested" or an
// empty default.
func Check(t testing.TB, name string, out string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("-h: %v, want success", err)
	}
	if !strings.HasPrefix(out, "Usage of "+name+":\n") {
		t.Errorf("-h prints\n%s\nwant the usage", out)
	}
	for _, bad := range []string{"help requested", "default )", "default \"\")"} {
		if strings.Contains(out, bad) {
			t.Errorf("-h prints %q:\n%s", bad, out)
		}
	}
}
