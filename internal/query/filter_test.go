package query_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/correx/sessions/internal/query"
)

// TestListingAndWatchFilterAlike: a listing and a watch take the same
// filter parameters, and refuse the same malformed ones with the same
// field and words (one parser serves both).
func TestListingAndWatchFilterAlike(t *testing.T) {
	f := newWatchFixture(t, query.WatchOptions{})
	bad := []string{
		"state=RUNNING",
		"prefix=" + url.QueryEscape("a/b"),
		"label=team",
		"label=" + url.QueryEscape("Bad Key=x"),
		"label=team=" + strings.Repeat("v", 257),
		strings.Repeat("label=k=v&", 17) + "x=1",
		"parent=" + url.QueryEscape("a/b"),
		"parent=a&parent=b",
	}
	problem := func(path string) (int, string) {
		t.Helper()
		resp := f.request(path, "")
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			return resp.StatusCode, "" // a watch that opened: a stream
		}
		b, _ := io.ReadAll(resp.Body)
		var p struct {
			Detail string `json:"detail"`
			Errors []struct {
				Field, Message string
			} `json:"errors"`
		}
		if err := json.Unmarshal(b, &p); err != nil || len(p.Errors) != 1 {
			t.Fatalf("%s: %d %s: want one field error", path, resp.StatusCode, b)
		}
		return resp.StatusCode, p.Errors[0].Field + ": " + p.Errors[0].Message
	}
	for _, q := range bad {
		ls, lp := problem("/v1/sessions?" + q)
		ws, wp := problem("/v1/watch?" + q)
		if ls != http.StatusBadRequest || ws != http.StatusBadRequest || lp != wp {
			t.Errorf("%.60s: listing %d %q, watch %d %q; want the same 400", q, ls, lp, ws, wp)
		}
	}
}
