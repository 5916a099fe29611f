package client_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDistinctDocs: no two exported functions of the public packages share
// a doc comment, which would say one of them wrong.
func TestDistinctDocs(t *testing.T) {
	for _, dir := range []string{".", "../fsm", "../testkit", "../feed"} {
		fset := token.NewFileSet()
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]string{}
		for _, e := range entries {
			if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.ParseComments)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range f.Decls {
				fn, ok := d.(*ast.FuncDecl)
				if !ok || !fn.Name.IsExported() || fn.Doc == nil || fn.Recv != nil {
					continue
				}
				doc := strings.TrimPrefix(fn.Doc.Text(), fn.Name.Name)
				if other, dup := seen[doc]; dup {
					t.Errorf("%s: %s and %s have the same doc: %q", dir, other, fn.Name.Name, doc)
				}
				seen[doc] = fn.Name.Name
			}
		}
	}
}
