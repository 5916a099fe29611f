package query_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/internal/workload"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
)

// A snapshot's answer is written from its MarshalJSON without
// encoding/json's second pass (httpx.WriteMarshaled): the bytes must be
// those WriteJSON writes, HTML-like text, metadata and annotations
// included, for every session of a realistic mix.
func TestSnapshotAnswerIsWriteJSONs(t *testing.T) {
	g := workload.New(7, workload.Options{InvalidShare: 0.05, DuplicateShare: 0.05})
	var r fsm.Reducer
	for i, evs := range g.Sessions("answer", 200, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)) {
		evs[0].Fields.Goal = `deploy <b>"a" & b</b> é` + "\u2028"
		evs[0].Fields.Metadata = []byte(`{"html":"<script>&amp;</script>","n":1}`)
		var s snapshot.Snapshot
		for j := range evs {
			s.Fold(&r, &evs[j], snapshot.Position{Partition: 1, Offset: int64(i*100 + j)})
		}
		viaEncoder, direct := httptest.NewRecorder(), httptest.NewRecorder()
		httpx.WriteJSON(viaEncoder, http.StatusOK, &s)
		httpx.WriteMarshaled(direct, http.StatusOK, &s)
		if !bytes.Equal(viaEncoder.Body.Bytes(), direct.Body.Bytes()) {
			t.Fatalf("%s: the answers differ:\nWriteJSON      %s\nWriteMarshaled %s", s.ID, viaEncoder.Body.Bytes(), direct.Body.Bytes())
		}
		if a, b := viaEncoder.Header().Get("Content-Type"), direct.Header().Get("Content-Type"); a != b {
			t.Fatalf("content types differ: %q and %q", a, b)
		}
	}
}
