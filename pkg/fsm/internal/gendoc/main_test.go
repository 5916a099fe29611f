package main

import (
	"bytes"
	"os"
	"strings"
	"testing"
)

// TestREADMEInSync fails when the README's lifecycle table or diagram differs
// from what the transition table renders; run `go generate ./pkg/fsm`.
func TestREADMEInSync(t *testing.T) {
	old, err := os.ReadFile("../../../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	want, err := update(old)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(old, want) {
		t.Fatal("README.md is out of date with pkg/fsm's table: run `go generate ./pkg/fsm`")
	}
}

func TestUpdateNeedsMarkers(t *testing.T) {
	if _, err := update([]byte("# no markers\n")); err == nil || !strings.Contains(err.Error(), "markers") {
		t.Fatalf("got %v, want a missing-markers error", err)
	}
}
