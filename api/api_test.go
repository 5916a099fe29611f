package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/correx/sessions/api"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
)

// The document is valid OpenAPI 3.1: libopenapi-validator checks it
// against the OpenAPI 3.1 schema, and libopenapi resolves every $ref.
func TestDocumentIsValidOpenAPI31(t *testing.T) {
	doc, err := libopenapi.NewDocument(api.Document())
	if err != nil {
		t.Fatal(err)
	}
	if v := doc.GetVersion(); !strings.HasPrefix(v, "3.1.") {
		t.Fatalf("openapi %q, want 3.1.x", v)
	}
	if _, err := doc.BuildV3Model(); err != nil {
		t.Fatalf("building the model: %v", err)
	}
	v, errs := validator.NewValidator(doc)
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Error(e)
			for _, f := range e.SchemaValidationErrors {
				t.Errorf("  %s at %s", f.Reason, f.FieldPath)
			}
		}
	}
}

// What is served is the file in the repository, byte for byte.
func TestHandlerServesTheFile(t *testing.T) {
	want, err := os.ReadFile("openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	api.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, api.Path, nil))
	body, _ := io.ReadAll(w.Body)
	if w.Code != 200 || w.Header().Get("Content-Type") != "application/json" || !bytes.Equal(body, want) {
		t.Fatalf("served %d %q, %d bytes; the file has %d", w.Code, w.Header().Get("Content-Type"), len(body), len(want))
	}
	w = httptest.NewRecorder()
	r := httptest.NewRequest(http.MethodGet, api.Path, nil)
	r.Header.Set("If-None-Match", httptestETag(t))
	api.Handler().ServeHTTP(w, r)
	if w.Code != http.StatusNotModified || w.Body.Len() != 0 {
		t.Fatalf("If-None-Match with the ETag: %d, %d bytes", w.Code, w.Body.Len())
	}
}

func httptestETag(t *testing.T) string {
	w := httptest.NewRecorder()
	api.Handler().ServeHTTP(w, httptest.NewRequest(http.MethodGet, api.Path, nil))
	if e := w.Header().Get("ETag"); e != "" {
		return e
	}
	t.Fatal("no ETag")
	return ""
}

// Every problem type URI written in the services' code is one the
// description lists, and the description lists no other: a new problem
// type fails here until the description names it. The URIs are written in
// pkg/wire's problem.go only, which the services and pkg/client both use.
func TestProblemTypesAreDescribed(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas struct {
				ProblemType struct {
					Enum []string `json:"enum"`
				} `json:"ProblemType"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(api.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	described := doc.Components.Schemas.ProblemType.Enum
	uri := regexp.MustCompile(`"(https://correx\.dev/problems/[a-z0-9-]+)"`)
	used := map[string]string{}
	for _, dir := range []string{"../internal", "../pkg", "../cmd"} {
		err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			for _, m := range uri.FindAllSubmatch(b, -1) {
				used[string(m[1])] = path
				if filepath.ToSlash(path) != "../pkg/wire/problem.go" {
					t.Errorf("%s writes the problem type %s: use pkg/wire's constant", path, m[1])
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(used) < 10 {
		t.Fatalf("found only %d problem types in the code: %v", len(used), used)
	}
	for u, where := range used {
		if !slices.Contains(described, u) {
			t.Errorf("%s (%s) is not in components/schemas/ProblemType", u, where)
		}
	}
	for _, u := range described {
		if _, ok := used[u]; !ok {
			t.Errorf("components/schemas/ProblemType lists %s, which no service writes", u)
		}
	}
}

// Every enum and const schema says its type: without one, generators make
// the field an interface{} (oapi-codegen) or fail to compile (ogen).
func TestEnumsAreTyped(t *testing.T) {
	var doc any
	if err := json.Unmarshal(api.Document(), &doc); err != nil {
		t.Fatal(err)
	}
	var n int
	var walk func(path string, o any)
	walk = func(path string, o any) {
		switch o := o.(type) {
		case map[string]any:
			_, enum := o["enum"]
			_, isConst := o["const"]
			if enum || isConst {
				n++
				if _, ok := o["type"]; !ok {
					t.Errorf("%s: an enum or const without a type", path)
				}
			}
			for k, v := range o {
				walk(path+"/"+k, v)
			}
		case []any:
			for i, v := range o {
				walk(fmt.Sprintf("%s/%d", path, i), v)
			}
		}
	}
	walk("#", doc)
	if n == 0 {
		t.Fatal("no enum or const found: the walk is wrong")
	}
}
