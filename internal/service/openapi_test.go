package service_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"testing"

	"github.com/correx/sessions/internal/service"
)

// A service with an API serves the file api/openapi.json, as it is in the
// repository, at /openapi.json without a token; one without (the
// projector) does not.
func TestOpenAPIDescriptionIsServed(t *testing.T) {
	want, err := os.ReadFile("../../api/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	get := func(addr string, h http.Header) (*http.Response, []byte) {
		req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/openapi.json", nil)
		for k, v := range h {
			req.Header[k] = v
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp, body
	}
	addr := start(t, service.Endpoint{API: api})
	resp, body := get(addr, nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("GET /openapi.json: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if !bytes.Equal(body, want) {
		t.Fatalf("GET /openapi.json served %d bytes that are not api/openapi.json (%d bytes)", len(body), len(want))
	}
	etag := resp.Header.Get("ETag")
	if resp, _ := get(addr, http.Header{"If-None-Match": {etag}}); etag == "" || resp.StatusCode != 304 {
		t.Fatalf("If-None-Match %q: %d", etag, resp.StatusCode)
	}
	if resp, _ := get(start(t, service.Endpoint{}), nil); resp.StatusCode != 404 {
		t.Fatalf("a service without an API answers /openapi.json with %d", resp.StatusCode)
	}
}
