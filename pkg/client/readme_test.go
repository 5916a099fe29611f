package client_test

import (
	"os"
	"strings"
	"testing"
)

// TestREADMEShowsTheExample keeps the README's Go quick start equal to the
// body of Example, which compiles.
func TestREADMEShowsTheExample(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	_, block, ok := strings.Cut(string(readme), "<!-- BEGIN client-example")
	if !ok {
		t.Fatal("README: no client-example block")
	}
	block, _, _ = strings.Cut(block, "<!-- END client-example -->")
	_, block, _ = strings.Cut(block, "```go\n")
	block, _, _ = strings.Cut(block, "```")

	_, body, ok := strings.Cut(string(src), "func Example() {\n")
	if !ok {
		t.Fatal("example_test.go: no func Example")
	}
	body, _, _ = strings.Cut(body, "\n}\n")
	var lines []string
	for l := range strings.SplitSeq(body, "\n") {
		lines = append(lines, strings.TrimPrefix(l, "\t"))
	}
	if want := strings.Join(lines, "\n") + "\n"; block != want {
		t.Errorf("README's client example differs from Example in example_test.go\nREADME:\n%s\nExample:\n%s", block, want)
	}
}
