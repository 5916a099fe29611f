package systemkey

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	keyA = []byte(strings.Repeat("a", 64))
	keyB = []byte(strings.Repeat("b", 64))
)

func TestSignAndVerifyWithRotation(t *testing.T) {
	old, _ := New([][]byte{keyA}, Line{})
	rotated, _ := New([][]byte{keyB, keyA}, Line{})
	other, _ := New([][]byte{keyB}, Line{})
	r := &kgo.Record{Key: []byte("s1"), Value: []byte("value")}
	old.Sign(r)
	for _, tc := range []struct {
		name string
		k    *Keys
		want bool
	}{{"same key", old, true}, {"rotated: the old key still verifies", rotated, true}, {"another key", other, false}, {"no key", nil, false}} {
		if got := tc.k.Verify(r); got != tc.want {
			t.Errorf("%s: Verify = %v, want %v", tc.name, got, tc.want)
		}
	}
	moved := &kgo.Record{Key: []byte("s2"), Value: r.Value, Headers: r.Headers}
	if old.Verify(moved) {
		t.Error("a MAC verified under another record key")
	}
	// The key's length is part of the MAC: key "s" + value "1value" differs.
	split := &kgo.Record{Key: []byte("s"), Value: []byte("1value"), Headers: r.Headers}
	if old.Verify(split) {
		t.Error("a MAC verified with the key/value split moved")
	}
	twice := &kgo.Record{Key: r.Key, Value: r.Value, Headers: append(append([]kgo.RecordHeader(nil), r.Headers...), r.Headers...)}
	if old.Verify(twice) {
		t.Error("a record with two MAC headers verified")
	}
	rotated.Sign(r) // replaces the header, signed with the first key
	if n := strings.Count(headerKeys(r), Header); n != 1 || !other.Verify(r) {
		t.Errorf("after signing again: %d headers, verifies under the new key %v; want 1, true", n, other.Verify(r))
	}
}

func headerKeys(r *kgo.Record) string {
	var b strings.Builder
	for _, h := range r.Headers {
		b.WriteString(h.Key + " ")
	}
	return b.String()
}

func TestParseFile(t *testing.T) {
	keys, err := ParseFile([]byte("# rotation: new first\n\n  " + string(keyB) + "  \n" + string(keyA) + "\n"))
	if err != nil || len(keys) != 2 || !bytes.Equal(keys[0], keyB) || !bytes.Equal(keys[1], keyA) {
		t.Fatalf("ParseFile: %q, %v; want the two keys, new first", keys, err)
	}
	for _, bad := range []string{"", "# only a comment\n", "short\n"} {
		if _, err := ParseFile([]byte(bad)); err == nil {
			t.Errorf("ParseFile(%q): no error", bad)
		} else if strings.Contains(err.Error(), "short\n") {
			t.Errorf("ParseFile(%q): the error %q quotes the key", bad, err)
		}
	}
}

// TestDecodeEventAtTheLine: below the line a record is read as before
// this release; at or above it, a reserved id or the system's origin
// header needs a MAC that verifies.
func TestDecodeEventAtTheLine(t *testing.T) {
	k, _ := New([][]byte{keyA}, Line{Events: map[int32]int64{0: 10}})
	system := fsm.DeriveEventID("TimeoutExpired", "s1", "inactivity", "2")
	client := fsm.EventID{0x01, 0x90, 6: 0x70, 8: 0x80, 15: 1}
	rec := func(id fsm.EventID, offset int64, header, signed bool) *kgo.Record {
		e := fsm.NewEvent(id, "s1", fsm.SessionCompleted, time.Unix(1700000000, 0), fsm.Fields{})
		r := &kgo.Record{Key: []byte("s1"), Value: fsm.AppendRecord(nil, &e), Offset: offset}
		if header {
			r.Headers = append(r.Headers, kafka.SystemHeader())
		}
		if signed {
			k.Sign(r)
		}
		return r
	}
	for _, tc := range []struct {
		name string
		r    *kgo.Record
		want error
	}{
		{"below the line, the system's header", rec(system, 9, true, false), nil},
		{"below the line, a reserved id without the header", rec(system, 9, false, false), fsm.ErrReservedEventID},
		{"at the line, signed", rec(system, 10, true, true), nil},
		{"at the line, the header without a MAC", rec(system, 10, true, false), ErrForged},
		{"at the line, a reserved id without either", rec(system, 10, false, false), ErrForged},
		{"at the line, a client's id with the header", rec(client, 10, true, false), ErrForged},
		{"at the line, a client's record", rec(client, 10, false, false), nil},
	} {
		var e fsm.Event
		if err := k.DecodeEvent(tc.r, &e); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
