package ingest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/ingest"
)

// TestEveryHandlerFieldIsSet: every exported field of Handler is given a
// value by some literal of the module (the service, a test): an option no
// caller sets is dead code that its doc comment describes as working.
func TestEveryHandlerFieldIsSet(t *testing.T) {
	set := map[string]bool{}
	root := filepath.Join("..", "..")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok || !isHandler(lit.Type, f.Name.Name) {
				return true
			}
			for _, e := range lit.Elts {
				if kv, ok := e.(*ast.KeyValueExpr); ok {
					if id, ok := kv.Key.(*ast.Ident); ok {
						set[id.Name] = true
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ht := reflect.TypeFor[ingest.Handler]()
	for i := range ht.NumField() {
		if f := ht.Field(i); f.IsExported() && !set[f.Name] {
			t.Errorf("ingest.Handler.%s is set by no caller", f.Name)
		}
	}
}

// isHandler reports whether a literal's type is ingest.Handler (Handler
// within package ingest).
func isHandler(typ ast.Expr, pkg string) bool {
	switch x := typ.(type) {
	case *ast.Ident:
		return pkg == "ingest" && x.Name == "Handler"
	case *ast.SelectorExpr:
		id, ok := x.X.(*ast.Ident)
		return ok && id.Name == "ingest" && x.Sel.Name == "Handler"
	}
	return false
}
