package httpx_test

import (
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/httpx"
)

// API JSON is not HTML-escaped: "<", ">" and "&" come back as themselves,
// not six bytes each (\u003c), in documents and in problems.
func TestJSONIsNotHTMLEscaped(t *testing.T) {
	const text = `a <b> & c`
	cases := []struct {
		name  string
		write func(*httptest.ResponseRecorder)
	}{
		{"json", func(w *httptest.ResponseRecorder) { httpx.WriteJSON(w, 200, map[string]string{"goal": text}) }},
		{"problem", func(w *httptest.ResponseRecorder) {
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeValidation, Status: 400, Detail: text})
		}},
		{"problem with extension", func(w *httptest.ResponseRecorder) {
			httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeValidation, Status: 400, Detail: text,
				Extra: map[string]any{"hint": text}})
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := httptest.NewRecorder()
			c.write(w)
			body := w.Body.String()
			if !json.Valid([]byte(body)) {
				t.Fatalf("not JSON: %s", body)
			}
			if strings.Contains(body, `\u00`) || !strings.Contains(body, `"`+text+`"`) {
				t.Fatalf("got %s, want %q as itself", body, text)
			}
		})
	}
}
