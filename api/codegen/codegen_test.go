package codegen

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	// The generated client's imports, kept in go.mod.
	_ "github.com/oapi-codegen/runtime"
	_ "github.com/oapi-codegen/runtime/types"
)

const document = "../openapi.json"

func TestOapiCodegenOutput(t *testing.T) {
	// The output must be inside this module to compile against its go.mod.
	dir, err := os.MkdirTemp(".", "gen-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	out := filepath.Join(dir, "gen.go")
	run(t, "go", "tool", "oapi-codegen", "-generate", "types,client", "-package", "gen", "-o", out, document)
	run(t, "go", "vet", "./"+filepath.ToSlash(dir))

	enumProps, enumSchemas := enums(t)
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, out, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.TypeSpec:
			if isEmptyInterface(n.Type) && enumSchemas[n.Name.Name] {
				t.Errorf("%s: type %s is interface{}, its schema an enum", fset.Position(n.Pos()), n.Name.Name)
			}
		case *ast.Field:
			if !isEmptyInterface(n.Type) || n.Tag == nil {
				return true
			}
			tag := reflect.StructTag(strings.Trim(n.Tag.Value, "`")).Get("json")
			name, _, _ := strings.Cut(tag, ",")
			if enumProps[name] {
				t.Errorf("%s: field %q is interface{}, its schema an enum", fset.Position(n.Pos()), name)
			}
		}
		return true
	})
}

// enums returns the names of the properties and of the component schemas
// of the document that are an enum or a const, or a $ref to one.
func enums(t *testing.T) (props, schemas map[string]bool) {
	t.Helper()
	b, err := os.ReadFile(document)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	schemas = map[string]bool{}
	comps, _ := doc["components"].(map[string]any)
	cs, _ := comps["schemas"].(map[string]any)
	for name, s := range cs {
		if isEnum(s, nil) {
			schemas[name] = true
		}
	}
	props = map[string]bool{}
	var walk func(any)
	walk = func(o any) {
		switch o := o.(type) {
		case map[string]any:
			if ps, ok := o["properties"].(map[string]any); ok {
				for name, s := range ps {
					if isEnum(s, schemas) {
						props[name] = true
					}
				}
			}
			for _, v := range o {
				walk(v)
			}
		case []any:
			for _, v := range o {
				walk(v)
			}
		}
	}
	walk(doc)
	if len(props) == 0 || len(schemas) == 0 {
		t.Fatalf("found %d enum properties and %d enum schemas: the walk is wrong", len(props), len(schemas))
	}
	return props, schemas
}

// isEnum reports whether s is an enum or a const schema, or a $ref to one
// of the component schemas in refs.
func isEnum(s any, refs map[string]bool) bool {
	m, ok := s.(map[string]any)
	if !ok {
		return false
	}
	if _, ok := m["enum"]; ok {
		return true
	}
	if _, ok := m["const"]; ok {
		return true
	}
	ref, _ := m["$ref"].(string)
	return ref != "" && refs[strings.TrimPrefix(ref, "#/components/schemas/")]
}

// isEmptyInterface reports whether e is interface{} or *interface{}.
func isEmptyInterface(e ast.Expr) bool {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	it, ok := e.(*ast.InterfaceType)
	return ok && len(it.Methods.List) == 0
}

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
