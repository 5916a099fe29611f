package testkit_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

// snippet is a README code block that copies a test file: the marker names
// the file, relative to the repository's root.
var snippet = regexp.MustCompile("(?s)<!-- snippet: ([^ ]+) -->\n```go\n(.*?)```\n")

// packageClause is the first package clause, which the README spells as a
// service's own test package would ("package orders_test", for a service
// package orders); the README says to use the reader's package name.
var packageClause = regexp.MustCompile(`(?m)^package \w+$`)

// TestREADMESnippets checks that every test file the README quotes (the
// section "Testing your service against correx-sessions") is quoted as it
// is, so that the snippets readers paste are the ones go test runs.
func TestREADMESnippets(t *testing.T) {
	root := filepath.Join("..", "..")
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, m := range snippet.FindAllSubmatch(readme, -1) {
		path := string(m[1])
		found[path] = true
		src, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(path)))
		if err != nil {
			t.Errorf("README quotes %s: %v", path, err)
			continue
		}
		want := packageClause.ReplaceAll(src, []byte("package orders_test"))
		if string(m[2]) != string(want) {
			t.Errorf("README's copy of %s differs from the file: copy the file into the README again", path)
		}
	}
	for _, path := range []string{"pkg/testkit/readme_test.go", "pkg/testkit/correx/readme_test.go"} {
		if !found[path] {
			t.Errorf("README does not quote %s", path)
		}
	}
}
