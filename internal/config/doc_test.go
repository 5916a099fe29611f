package config_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strings"
	"testing"
)

// TestEverySettingHasOneDefaultLine: each field of the services' Config
// types and of the blocks they share says its default on one
// "default:" line of its doc comment. The blocks with a Bind of their own
// (Redis, Auth, TLS) are left to their types: redisconn.Config is checked
// here.
func TestEverySettingHasOneDefaultLine(t *testing.T) {
	blocks := map[string]bool{"Redis": true, "Auth": true, "TLS": true}
	for _, c := range []struct{ file, typ string }{
		{"../ingest/service.go", "Config"},
		{"../projector/config.go", "Config"},
		{"../query/service.go", "Config"},
		{"../redisconn/redisconn.go", "Config"},
		{"../kafka/kafka.go", "Config"},
		{"../auth/config.go", "Config"},
		{"../httpx/tls.go", "TLSConfig"},
	} {
		f, err := parser.ParseFile(token.NewFileSet(), c.file, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		found := false
		ast.Inspect(f, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok || ts.Name.Name != c.typ {
				return true
			}
			found = true
			for _, field := range ts.Type.(*ast.StructType).Fields.List {
				for _, name := range field.Names {
					if !name.IsExported() || blocks[name.Name] {
						continue
					}
					n := 0
					if field.Doc != nil {
						for _, l := range strings.Split(field.Doc.Text(), "\n") {
							if strings.HasPrefix(l, "default: ") {
								n++
							}
						}
					}
					if n != 1 {
						t.Errorf("%s: %s.%s has %d \"default:\" lines in its doc comment, want 1", c.file, c.typ, name.Name, n)
					}
				}
			}
			return false
		})
		if !found {
			t.Errorf("%s declares no type %s", c.file, c.typ)
		}
	}
}
