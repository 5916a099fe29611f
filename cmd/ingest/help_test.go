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
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"-h"}, func(string) string { return "" }, &stderr)
	helptest.Check(t, "ingest", stderr.String(), err)
}
