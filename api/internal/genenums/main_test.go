package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
)

const document = "../../openapi.json"

// TestOpenAPIInSync: openapi.json's generated schemas are what pkg/fsm
// says (go generate ./api writes them).
func TestOpenAPIInSync(t *testing.T) {
	doc, err := os.ReadFile(document)
	if err != nil {
		t.Fatal(err)
	}
	out, err := rewrite(doc)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, doc) {
		t.Fatal("api/openapi.json's generated enumerations differ from pkg/fsm or pkg/wire: run go generate ./api")
	}
}

// TestRewriteWritesFromFSM: a schema edited by hand is written back.
func TestRewriteWritesFromFSM(t *testing.T) {
	doc, err := os.ReadFile(document)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(doc, []byte(`"AWAITING_APPROVAL",`), []byte(`"WAITING",`), 1)
	if bytes.Equal(edited, doc) {
		t.Fatal("the document spells no AWAITING_APPROVAL to edit")
	}
	out, err := rewrite(edited)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out, doc) {
		t.Fatal("rewrite did not write State back from pkg/fsm")
	}
}

// TestEnumerationsSpelledOnce: no schema of the description spells one of
// the generated enumerations inline; each refers to it.
func TestEnumerationsSpelledOnce(t *testing.T) {
	doc, err := os.ReadFile(document)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatal(err)
	}
	gen := map[string]string{}
	for _, g := range generated() {
		vals := slices.Clone(g.Schema.Enum)
		slices.Sort(vals)
		gen[strings.Join(vals, ",")] = g.Name
	}
	var walk func(path string, o any)
	walk = func(path string, o any) {
		switch o := o.(type) {
		case map[string]any:
			if e, ok := o["enum"].([]any); ok {
				var vals []string
				for _, x := range e {
					vals = append(vals, fmt.Sprint(x))
				}
				slices.Sort(vals)
				if name, ok := gen[strings.Join(vals, ",")]; ok && path != "/components/schemas/"+name {
					t.Errorf("%s spells the values of %s: refer to it with {\"$ref\": \"#/components/schemas/%s\"}", path, name, name)
				}
			}
			for k, x := range o {
				walk(path+"/"+k, x)
			}
		case []any:
			for i, x := range o {
				walk(fmt.Sprintf("%s/%d", path, i), x)
			}
		}
	}
	walk("", v)
}
