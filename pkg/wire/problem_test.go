package wire_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/correx/sessions/pkg/wire"
)

// A problem's JSON is its standard members in their order, then, with
// extension members, one object with every member by name; no HTML
// escaping either way. It decodes back to the same standard members.
func TestProblemJSON(t *testing.T) {
	p := wire.Problem{Type: "https://correx.dev/problems/validation", Status: 400, Detail: "a <b> & c",
		Errors: []wire.FieldError{{Index: 1, Field: "sessionId", Message: "required"}}}
	cases := []struct {
		name  string
		extra map[string]any
		want  string
	}{
		{"standard members", nil,
			`{"type":"https://correx.dev/problems/validation","title":"","status":400,"detail":"a <b> & c","errors":[{"index":1,"field":"sessionId","message":"required"}]}`},
		{"extension members", map[string]any{"partition": 3, "status": 500},
			`{"detail":"a <b> & c","errors":[{"field":"sessionId","index":1,"message":"required"}],"partition":3,"status":400,"title":"","type":"https://correx.dev/problems/validation"}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := p
			p.Extra = c.extra
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf) // json.Marshal would escape the HTML again
			enc.SetEscapeHTML(false)
			if err := enc.Encode(p); err != nil {
				t.Fatal(err)
			}
			b := bytes.TrimSuffix(buf.Bytes(), []byte{'\n'})
			if string(b) != c.want {
				t.Fatalf("got  %s\nwant %s", b, c.want)
			}
			var back wire.Problem
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			p.Extra = nil
			if !reflect.DeepEqual(back, p) {
				t.Fatalf("decoded %+v, want %+v", back, p)
			}
		})
	}
}
