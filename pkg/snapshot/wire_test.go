package snapshot_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"

	"github.com/correx/sessions/pkg/client"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

var updateJSON = flag.Bool("update", false, "rewrite testdata/json-v3.jsonl from the current code")

// jsonForms returns the API form and the stored JSON form of the shape
// variants and of the first sessions of the corpus, one per line.
func jsonForms(t *testing.T) []byte {
	snaps := shapeVariants(t)
	for _, events := range corpus(t)[:12] {
		snaps = append(snaps, fold(events, 40))
	}
	var out bytes.Buffer
	for _, s := range snaps {
		api, err := s.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		stored, err := snapshot.EncodeJSON(s)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(api)
		out.WriteByte('\n')
		out.Write(stored)
		out.WriteByte('\n')
	}
	return out.Bytes()
}

// TestJSONBytes pins the bytes of the JSON forms (testdata/json-v3.jsonl,
// written before the shape moved to pkg/wire): the API form is what
// clients and stored caches read, so a change of the types behind it must
// not change a byte. (Format 4 added a decision's sentBy: the two shape
// variants, whose every field is filled with numbered values, were
// rewritten then; the folded sessions' lines did not change.)
func TestJSONBytes(t *testing.T) {
	got := jsonForms(t)
	if *updateJSON {
		if err := os.WriteFile("testdata/json-v3.jsonl", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/json-v3.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	gl, wl := bytes.Split(got, []byte("\n")), bytes.Split(want, []byte("\n"))
	if len(gl) != len(wl) {
		t.Fatalf("%d lines, want %d", len(gl), len(wl))
	}
	for i := range wl {
		if !bytes.Equal(gl[i], wl[i]) {
			t.Errorf("line %d differs:\n got %s\nwant %s", i+1, gl[i], wl[i])
		}
	}
}

// TestWireIsTheAPIForm: Wire gives the wire.Snapshot that MarshalJSON
// writes, which is the client's Snapshot, one type.
func TestWireIsTheAPIForm(t *testing.T) {
	var _ *client.Snapshot = (*wire.Snapshot)(nil)
	for vi, s := range shapeVariants(t) {
		w, err := s.Wire()
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(w); err != nil {
			t.Fatal(err)
		}
		api, err := s.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		if got := bytes.TrimSuffix(buf.Bytes(), []byte("\n")); !bytes.Equal(got, api) {
			t.Errorf("variant %d: wire.Snapshot encodes to\n%s\nMarshalJSON writes\n%s", vi, got, api)
		}
	}
	var zero snapshot.Snapshot
	if _, err := zero.Wire(); err == nil {
		t.Error("the zero snapshot (no state) has a wire form")
	}
	if _, err := zero.MarshalJSON(); err == nil {
		t.Error("the zero snapshot (no state) encodes")
	}
}
