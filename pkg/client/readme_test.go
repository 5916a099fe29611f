package client_test

import (
	"os"
	"path/filepath"
	"regexp"
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

// TestDocsNameREADMESections: every README section a doc comment of the
// public packages names, as (README, "Section"), is a heading of the README.
func TestDocsNameREADMESections(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	ref := regexp.MustCompile(`README, "([^"]+)"`)
	files, err := filepath.Glob("../*/*.go")
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ref.FindAllStringSubmatch(string(src), -1) {
			found++
			if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(m[1]) + `$`).Match(readme) {
				t.Errorf("%s refers to the README's %q, which has no such section", f, m[1])
			}
		}
	}
	if found == 0 {
		t.Fatal("no reference found: the pattern no longer matches the docs")
	}
}

// TestREADMEContents: the README's contents line links every section, in
// order, by the anchor GitHub gives its heading.
func TestREADMEContents(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^Contents: (.*)$`).FindSubmatch(readme)
	if line == nil {
		t.Fatal("README has no Contents: line")
	}
	var want []string
	for _, h := range regexp.MustCompile(`(?m)^## (.+)$`).FindAllSubmatch(readme, -1) {
		title := string(h[1])
		anchor := strings.ReplaceAll(regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(strings.ToLower(title), ""), " ", "-")
		want = append(want, "["+title+"](#"+anchor+")")
	}
	if got := strings.Split(string(line[1]), " · "); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("contents\n got %q\nwant %q", got, want)
	}
}
