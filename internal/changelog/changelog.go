// Package changelog owns the record format of the snapshot changelog
// (docs/exactly-once.md, "The snapshot changelog"): the compacted topic "<events topic>.snapshots" the
// projector produces each flushed snapshot to, with one checkpoint record
// per partition after the snapshots it covers are acknowledged, and in
// which an archived session's last record says so. A restore reads it back
// (the projector's restore). The topic has the events topic's partition count, and a
// record goes to its session's events partition.
//
// Every record carries the header correx-changelog naming its kind:
//
//   - snapshot: key = sessionId, value = the stored binary snapshot
//     (snapshot.Snapshot.AppendBinary).
//   - checkpoint: key = CheckpointKey ("\x00checkpoint", which no session
//     id can take: fsm.ValidSessionID refuses control characters), value =
//     JSON {"offset":N,"highWatermark":H}: every snapshot folded from the
//     events partition below offset N is in the changelog before it.
//   - archived: key = sessionId, value = JSON
//     {"archived":true,"position":"P:O"}: the session left Redis for the
//     archive; a restore does not write it back, whatever came before it.
package changelog

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Topic returns the changelog's topic for an events topic.
func Topic(events string) string { return events + ".snapshots" }

// Header is the record header naming a record's kind.
const Header = "correx-changelog"

// CheckpointKey is the key of the checkpoint records: no session id can
// take it (fsm.ValidSessionID).
const CheckpointKey = "\x00checkpoint"

// DeleteRetention is the topic's delete.retention.ms when the projector
// creates it: how long a tombstone stays readable after compaction. A
// restore that reads an old value of a key but not its tombstone would
// bring the key back, so it must be far above the longest restore (a
// restore reads every partition in seconds to minutes): 7 days.
const DeleteRetention = "604800000"

// Kind is what a changelog record says.
type Kind string

// The kinds of records, the values of Header.
const (
	KindSnapshot   Kind = "snapshot"
	KindCheckpoint Kind = "checkpoint"
	KindArchived   Kind = "archived"
)

// Checkpoint is the value of a checkpoint record: the events partition's
// next offset to fold, and its high watermark when it was reached.
type Checkpoint struct {
	Offset        int64 `json:"offset"`
	HighWatermark int64 `json:"highWatermark"`
}

// Archived is the value of an archived record.
type Archived struct {
	Archived bool   `json:"archived"`
	Position string `json:"position"` // "partition:offset" of the session's last event
	Final
}

// Final is what an archived record says of the session's end, for its
// tombstone (docs/retention.md, "An archived id stays archived");
// records from before tombstones have none.
type Final struct {
	State   string `json:"state,omitempty"`   // the final state's name
	Version uint64 `json:"version,omitempty"` // the final version
	EndedMs int64  `json:"endedMs,omitempty"` // the end, Unix milliseconds
}

// Record is a decoded changelog record.
type Record struct {
	Kind       Kind
	SessionID  string     // snapshot and archived
	Snapshot   []byte     // snapshot: the binary snapshot, as stored
	Checkpoint Checkpoint // checkpoint
	// Position is the snapshot's position (read from its encoding), or
	// the archived session's.
	Position snapshot.Position
	// Final is an archived record's end of the session (zero when the
	// record has none).
	Final Final
}

func record(topic string, partition int32, kind Kind, key string, value []byte) *kgo.Record {
	return &kgo.Record{Topic: topic, Partition: partition, Key: []byte(key), Value: value,
		Headers: []kgo.RecordHeader{{Key: Header, Value: []byte(kind)}}}
}

// SnapshotRecord returns the record of a stored snapshot, on partition
// (the session's events partition), whose value is data
// (snapshot.Snapshot.AppendBinary).
func SnapshotRecord(topic string, partition int32, sessionID string, data []byte) *kgo.Record {
	return record(topic, partition, KindSnapshot, sessionID, data)
}

// CheckpointRecord returns a partition's checkpoint record.
func CheckpointRecord(topic string, partition int32, cp Checkpoint) *kgo.Record {
	v, _ := json.Marshal(cp)
	return record(topic, partition, KindCheckpoint, CheckpointKey, v)
}

// ArchivedRecord returns the record saying that a session was archived out
// of Redis, its last event at pos (on partition pos.Partition).
func ArchivedRecord(topic, sessionID string, pos snapshot.Position) *kgo.Record {
	return ArchivedRecordFinal(topic, sessionID, pos, Final{})
}

// ArchivedRecordFinal is ArchivedRecord saying how the session ended, which
// a restore keeps as its tombstone.
func ArchivedRecordFinal(topic, sessionID string, pos snapshot.Position, f Final) *kgo.Record {
	v, _ := json.Marshal(Archived{Archived: true, Position: pos.String(), Final: f})
	return record(topic, pos.Partition, KindArchived, sessionID, v)
}

// ErrNotChangelog is returned for a record without a known kind.
var ErrNotChangelog = errors.New("changelog: not a changelog record")

// DecodeRecord reads a changelog record. Of a snapshot record's value it
// reads the head (snapshot.DecodeHead): the session id, which must be the
// key, and the position, which is returned (the restore keeps the latest
// position of each session, and decodes only the snapshots it keeps).
func DecodeRecord(r *kgo.Record) (Record, error) {
	var kind Kind
	for _, h := range r.Headers {
		if h.Key == Header {
			kind = Kind(h.Value)
		}
	}
	key := string(r.Key)
	switch kind {
	case KindSnapshot:
		if !fsm.ValidSessionID(key) {
			return Record{}, fmt.Errorf("changelog: snapshot record key %q: not a session id", cut(key))
		}
		id, pos, err := snapshot.DecodeHead(r.Value)
		if err != nil {
			return Record{}, fmt.Errorf("changelog: snapshot of %s: %w", key, err)
		}
		if id != key {
			return Record{}, fmt.Errorf("changelog: snapshot record key %q holds session %q", key, cut(id))
		}
		return Record{Kind: kind, SessionID: key, Snapshot: r.Value, Position: pos}, nil
	case KindCheckpoint:
		if key != CheckpointKey {
			return Record{}, fmt.Errorf("changelog: checkpoint record key %q: want %q", cut(key), CheckpointKey)
		}
		var cp Checkpoint
		if err := json.Unmarshal(r.Value, &cp); err != nil {
			return Record{}, fmt.Errorf("changelog: checkpoint value: %w", err)
		}
		if cp.Offset < 0 {
			return Record{}, fmt.Errorf("changelog: checkpoint offset %d: want at least 0", cp.Offset)
		}
		return Record{Kind: kind, Checkpoint: cp}, nil
	case KindArchived:
		if !fsm.ValidSessionID(key) {
			return Record{}, fmt.Errorf("changelog: archived record key %q: not a session id", cut(key))
		}
		var a Archived
		if err := json.Unmarshal(r.Value, &a); err != nil {
			return Record{}, fmt.Errorf("changelog: archived value of %s: %w", key, err)
		}
		if !a.Archived {
			return Record{}, fmt.Errorf("changelog: archived value of %s: \"archived\" must be true", key)
		}
		pos, err := snapshot.ParsePosition(a.Position)
		if err != nil {
			return Record{}, fmt.Errorf("changelog: archived value of %s: %w", key, err)
		}
		return Record{Kind: kind, SessionID: key, Position: pos, Final: a.Final}, nil
	}
	return Record{}, fmt.Errorf("%w: header %s is %q", ErrNotChangelog, Header, cut(string(kind)))
}

func cut(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// Latest is what a restore keeps of a changelog partition read from its
// start: the latest record of each key, so it is bounded by the
// partition's sessions, not by its history.
//
//   - A snapshot replaces the session's kept snapshot only at a higher
//     position: a writer that lost the partition (a zombie) may produce an
//     older snapshot after the new owner's newer one, and the newer one
//     is the one the checkpoints after it count on.
//   - An archived record removes the session, whatever came before it; a
//     later snapshot of the session (a writer that had not seen it
//     archived) does not bring it back unless its position is past the
//     archived one.
//   - The checkpoint is the latest one read (a lower one is safe: the
//     fold from it skips what the snapshots already reflect).
type Latest struct {
	Snapshots map[string]Record // by session id
	Archived  map[string]snapshot.Position
	// Finals holds what the archived records with one say of the
	// session's end, by session id (a subset of Archived's).
	Finals map[string]Final
	// Checkpoint is the latest checkpoint, when HasCheckpoint.
	Checkpoint    Checkpoint
	HasCheckpoint bool
}

// Add keeps r if it is the latest of its key. A snapshot it keeps is
// copied: a fetched record's value is a slice of its whole batch (franz-go
// decodes a batch's records in place), so a kept slice would hold the
// batch in memory, and a restore, which keeps a record from nearly every
// batch, would hold nearly the whole changelog partition, every
// superseded snapshot included, instead of one snapshot a session.
func (l *Latest) Add(r Record) {
	if l.Snapshots == nil {
		l.Snapshots, l.Archived = map[string]Record{}, map[string]snapshot.Position{}
	}
	if l.Finals == nil {
		l.Finals = map[string]Final{}
	}
	switch r.Kind {
	case KindCheckpoint:
		l.Checkpoint, l.HasCheckpoint = r.Checkpoint, true
	case KindArchived:
		delete(l.Snapshots, r.SessionID)
		l.Archived[r.SessionID] = r.Position
		if r.Final != (Final{}) {
			l.Finals[r.SessionID] = r.Final
		} else {
			delete(l.Finals, r.SessionID)
		}
	case KindSnapshot:
		if at, ok := l.Archived[r.SessionID]; ok && !at.Less(r.Position) {
			return
		}
		if kept, ok := l.Snapshots[r.SessionID]; ok && !kept.Position.Less(r.Position) {
			return
		}
		delete(l.Archived, r.SessionID)
		delete(l.Finals, r.SessionID)
		r.Snapshot = bytes.Clone(r.Snapshot)
		l.Snapshots[r.SessionID] = r
	}
}
