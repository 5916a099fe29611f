package changelog

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

func snap(t *testing.T, id string, offset int64) *snapshot.Snapshot {
	t.Helper()
	var s snapshot.Snapshot
	var red fsm.Reducer
	ev := fsm.NewEvent(fsm.EventID{byte(offset), 1}, id, fsm.SessionCreated, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), fsm.Fields{Goal: "g"})
	if _, ok := s.Fold(&red, &ev, snapshot.Position{Partition: 2, Offset: offset}); !ok {
		t.Fatal("not folded")
	}
	return &s
}

func header(r *kgo.Record) string {
	for _, h := range r.Headers {
		if h.Key == Header {
			return string(h.Value)
		}
	}
	return ""
}

// TestRecordFormat pins the records' keys, values, headers and partitions,
// which other writers of the topic rely on, and reads each back.
func TestRecordFormat(t *testing.T) {
	if Topic("events") != "events.snapshots" {
		t.Fatalf("Topic: %q", Topic("events"))
	}
	s := snap(t, "s-1", 7)
	data := s.AppendBinary(nil)

	r := SnapshotRecord("events.snapshots", 2, "s-1", data)
	if string(r.Key) != "s-1" || !bytes.Equal(r.Value, data) || r.Partition != 2 || header(r) != "snapshot" || r.Topic != "events.snapshots" {
		t.Fatalf("snapshot record: %+v", r)
	}
	got, err := DecodeRecord(r)
	if err != nil || got.Kind != KindSnapshot || got.SessionID != "s-1" || got.Position != (snapshot.Position{Partition: 2, Offset: 7}) || !bytes.Equal(got.Snapshot, data) {
		t.Fatalf("decoded snapshot: %+v, %v", got, err)
	}

	r = CheckpointRecord("events.snapshots", 3, Checkpoint{Offset: 120, HighWatermark: 130})
	if string(r.Key) != "\x00checkpoint" || string(r.Value) != `{"offset":120,"highWatermark":130}` || r.Partition != 3 || header(r) != "checkpoint" {
		t.Fatalf("checkpoint record: %+v", r)
	}
	if fsm.ValidSessionID(CheckpointKey) {
		t.Fatal("a session id can take the checkpoint key")
	}
	got, err = DecodeRecord(r)
	if err != nil || got.Kind != KindCheckpoint || got.Checkpoint != (Checkpoint{Offset: 120, HighWatermark: 130}) {
		t.Fatalf("decoded checkpoint: %+v, %v", got, err)
	}

	r = ArchivedRecord("events.snapshots", "s-1", snapshot.Position{Partition: 2, Offset: 9})
	if string(r.Key) != "s-1" || string(r.Value) != `{"archived":true,"position":"2:9"}` || r.Partition != 2 || header(r) != "archived" {
		t.Fatalf("archived record: %+v", r)
	}
	got, err = DecodeRecord(r)
	if err != nil || got.Kind != KindArchived || got.SessionID != "s-1" || got.Position != (snapshot.Position{Partition: 2, Offset: 9}) {
		t.Fatalf("decoded archived: %+v, %v", got, err)
	}
}

// TestDecodeRefuses names what is wrong with a record instead of keeping it.
func TestDecodeRefuses(t *testing.T) {
	data := snap(t, "s-1", 7).AppendBinary(nil)
	hdr := func(k string) []kgo.RecordHeader { return []kgo.RecordHeader{{Key: Header, Value: []byte(k)}} }
	cases := []struct {
		name string
		r    *kgo.Record
		want string
	}{
		{"no header", &kgo.Record{Key: []byte("s-1"), Value: data}, "not a changelog record"},
		{"unknown kind", &kgo.Record{Key: []byte("s-1"), Value: data, Headers: hdr("other")}, `header correx-changelog is "other"`},
		{"snapshot of another session", &kgo.Record{Key: []byte("s-2"), Value: data, Headers: hdr("snapshot")}, `holds session "s-1"`},
		{"snapshot under the checkpoint key", &kgo.Record{Key: []byte(CheckpointKey), Value: data, Headers: hdr("snapshot")}, "not a session id"},
		{"corrupt snapshot", &kgo.Record{Key: []byte("s-1"), Value: []byte{1, 2}, Headers: hdr("snapshot")}, "snapshot of s-1"},
		{"checkpoint under a session key", &kgo.Record{Key: []byte("s-1"), Value: []byte(`{"offset":1}`), Headers: hdr("checkpoint")}, "checkpoint record key"},
		{"negative checkpoint", &kgo.Record{Key: []byte(CheckpointKey), Value: []byte(`{"offset":-1}`), Headers: hdr("checkpoint")}, "checkpoint offset -1"},
		{"archived false", &kgo.Record{Key: []byte("s-1"), Value: []byte(`{"archived":false,"position":"1:2"}`), Headers: hdr("archived")}, `"archived" must be true`},
		{"archived without position", &kgo.Record{Key: []byte("s-1"), Value: []byte(`{"archived":true}`), Headers: hdr("archived")}, "archived value of s-1"},
	}
	for _, c := range cases {
		_, err := DecodeRecord(c.r)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.want)
		}
	}
	if _, err := DecodeRecord(cases[0].r); !errors.Is(err, ErrNotChangelog) {
		t.Errorf("no header: %v, want ErrNotChangelog", err)
	}
}

// TestLatest keeps the latest record of each key: an archived record
// removes its session whatever came before it, an older snapshot written
// after a newer one does not replace it, and the latest checkpoint wins.
func TestLatest(t *testing.T) {
	var l Latest
	dec := func(r *kgo.Record) Record {
		t.Helper()
		d, err := DecodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	const tp = "events.snapshots"
	l.Add(dec(SnapshotRecord(tp, 2, "a", snap(t, "a", 5).AppendBinary(nil))))
	l.Add(dec(SnapshotRecord(tp, 2, "b", snap(t, "b", 6).AppendBinary(nil))))
	l.Add(dec(CheckpointRecord(tp, 2, Checkpoint{Offset: 7, HighWatermark: 9})))
	l.Add(dec(SnapshotRecord(tp, 2, "a", snap(t, "a", 8).AppendBinary(nil))))
	l.Add(dec(SnapshotRecord(tp, 2, "a", snap(t, "a", 4).AppendBinary(nil)))) // a zombie's older one
	l.Add(dec(ArchivedRecord(tp, "b", snapshot.Position{Partition: 2, Offset: 6})))
	l.Add(dec(SnapshotRecord(tp, 2, "b", snap(t, "b", 6).AppendBinary(nil)))) // written again, not past the archive
	l.Add(dec(SnapshotRecord(tp, 2, "c", snap(t, "c", 3).AppendBinary(nil))))
	l.Add(dec(ArchivedRecord(tp, "c", snapshot.Position{Partition: 2, Offset: 3})))
	l.Add(dec(CheckpointRecord(tp, 2, Checkpoint{Offset: 10, HighWatermark: 10})))
	if len(l.Snapshots) != 1 || l.Snapshots["a"].Position.Offset != 8 {
		t.Fatalf("kept snapshots: %+v", l.Snapshots)
	}
	if _, ok := l.Archived["b"]; !ok {
		t.Fatalf("b is not kept as archived: %+v", l.Archived)
	}
	if _, ok := l.Archived["c"]; !ok {
		t.Fatalf("c is not kept as archived: %+v", l.Archived)
	}
	if !l.HasCheckpoint || l.Checkpoint != (Checkpoint{Offset: 10, HighWatermark: 10}) {
		t.Fatalf("checkpoint: %+v %v", l.Checkpoint, l.HasCheckpoint)
	}
}
