package main

import (
	"bytes"
	"context"
	"testing"

	"github.com/correx/sessions/internal/helptest"
)

// TestHelp: -h prints the usage and succeeds (exit 0), with no error line
// and no empty default.
func TestHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stdout, &stderr)
	helptest.Check(t, "loadgen", stderr.String(), err)
}
