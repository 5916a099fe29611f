package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	c, err := parse([]string{"-sessions", "7", "-seed", "3", "-batch", "1"}, func(string) string { return "" }, &bytes.Buffer{})
	if err != nil || c.Sessions != 7 || c.Seed != 3 || c.Batch != 1 || !c.Verify {
		t.Fatalf("%+v %v", c, err)
	}
	if _, err := parse([]string{"-batch", "1001", "-invalid", "2"}, func(string) string { return "" }, &bytes.Buffer{}); err == nil ||
		!strings.Contains(err.Error(), "-batch") || !strings.Contains(err.Error(), "-invalid") {
		t.Fatalf("%v", err)
	}
}
