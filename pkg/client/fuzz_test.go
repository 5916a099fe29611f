package client

import (
	"encoding/json"
	"slices"
	"testing"
)

// FuzzParseAccepted checks the fast decoder of ingest's 202 answer against
// encoding/json. Invariants: it never panics; when it reports ok and
// encoding/json decodes the same bytes, both give the same accepted list;
// on every answer ingest writes (encoding/json's form of the struct), it
// reports ok.
func FuzzParseAccepted(f *testing.F) {
	for _, acc := range [][]Accepted{
		nil,
		{{EventID: "0193a5b2-0000-7000-8000-000000000001", Partition: 7, Offset: 0}},
		{{EventID: "a", Partition: 0, Offset: 1}, {EventID: "b", Partition: 2147483647, Offset: 1 << 40}},
	} {
		b, _ := json.Marshal(ingestAnswer{Accepted: acc, Position: "7:0"})
		f.Add(b)
	}
	f.Add([]byte(`{"accepted":[{"eventId":"a\"b","partition":1,"offset":2}],"position":"1:2"}`))
	f.Add([]byte(`{"accepted":[{"eventId":"a","partition":-1,"offset":2}]}`))
	f.Add([]byte(`{"accepted":[{"eventId":"a","partition":1,"offset":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		fast, ok := parseAccepted(b, 4)
		var ans ingestAnswer
		if !ok || json.Unmarshal(b, &ans) != nil {
			return
		}
		if !slices.Equal(fast, ans.Accepted) && !(len(fast) == 0 && len(ans.Accepted) == 0) {
			t.Fatalf("fast %+v, encoding/json %+v", fast, ans.Accepted)
		}
	})
}

// TestParseAcceptedTakesIngestAnswers: the fast path is taken for the form
// ingest writes, so the fallback is the exception.
func TestParseAcceptedTakesIngestAnswers(t *testing.T) {
	want := []Accepted{{EventID: "0193a5b2-0000-7000-8000-000000000001", Partition: 7, Offset: 12}, {EventID: "x", Partition: 0, Offset: 0}}
	b, _ := json.Marshal(ingestAnswer{Accepted: want, Position: "0:0"})
	got, ok := parseAccepted(b, 2)
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("parseAccepted(%s) = %+v, %v", b, got, ok)
	}
}
