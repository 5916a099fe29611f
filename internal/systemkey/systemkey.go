// Package systemkey authenticates the records the system derives
// (docs/security.md, "System records"): the firer's TimeoutExpired, the projector's cascaded
// CancellationRequested (escalations included) and replacement events on
// the events topic, and every record of the snapshot changelog. Each
// carries the header correx-mac (Header), the hex HMAC-SHA256 under the
// system key of the record's Kafka key and value:
//
//	HMAC-SHA256(k, uint32be(len(key)) || key || value)
//
// The record key is included, so a value cannot be replayed under another
// key (a changelog snapshot moved to another session's key, an archived
// record moved to another session), and the length prefix keeps the split
// between key and value unambiguous. Headers and the topic are not: a
// system record copied verbatim to where it already was is a duplicate
// (its derived event id, its changelog key), which the readers already
// absorb.
//
// # The key
//
// CORREX_SYSTEM_KEY_FILE names a file with one key per line (a Kubernetes
// Secret in the chart): blank lines and lines starting with # are skipped,
// every other line, trimmed of spaces, is a key of at least MinKeyBytes
// bytes, used as it is written (e.g. `openssl rand -hex 32`). The first
// key signs; every key verifies, so a key is rotated by putting the new
// one first, restarting, and removing the old one once no record it signed
// is needed (the events log's retention, and the changelog's records
// rewritten, which every flush of a session does).
//
// Without the file, the key is kept in the compacted topic
// "<events topic>.system" (Topic), one partition: the first projector
// that finds the topic empty produces a random 32-byte key there, and
// every projector (this one again too, after its produce) takes the record
// at the lowest offset, so two projectors starting at once agree. The
// records have distinct keys, so compaction never removes the first one.
// The key thus survives the loss of Redis. Its topic must be readable by
// the projector alone (docs/security.md): whoever reads it can sign.
//
// # Where the line is drawn (records from before this release)
//
// The same first record holds the line (Line): for every partition of the
// events topic and of the changelog, their end offsets when the record was
// created. A record below its partition's line was written before any
// projector signed: it is read as before this release (an event with the
// system's origin header and a reserved id is the system's; a changelog
// record is read without a MAC). A record at or above the line must carry
// a MAC that verifies. This is the safe choice: the line is fixed once,
// before anything is signed, so a record another producer writes later is
// always above it, whereas "records before the first signed one" would let
// a forged record in on any partition the system has not yet written to.
// Every projector of the group must run this release from the line on: a
// system record an older projector writes above it is dead-lettered
// forged_system_event (stop the older projectors before starting this
// release).
package systemkey

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/internal/kafka"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Header is the record header holding the hex HMAC-SHA256 of a system
// record's key and value.
const Header = "correx-mac"

// MinKeyBytes is the shortest key accepted from CORREX_SYSTEM_KEY_FILE.
const MinKeyBytes = 32

// Topic returns the topic that keeps the system key and the line for an
// events topic.
func Topic(events string) string { return events + ".system" }

// ErrForged reports a record that claims to be the system's (its eventId
// lies in the reserved space, or it carries the system's origin header) at
// or above the line without a MAC that verifies. The projector sets it
// aside as forged_system_event; the replay skips it.
var ErrForged = errors.New("a system record without a valid correx-mac")

// Line is where signing starts: the first offset of each partition from
// which a record must carry a MAC that verifies. A partition it does not
// list (added later) has line 0: every record must.
type Line struct {
	Events    map[int32]int64 `json:"events"`
	Changelog map[int32]int64 `json:"changelog"`
}

// Keys signs and verifies system records. A nil *Keys signs nothing and
// verifies as before this release (kafka.DecodeEvent's rule alone): the
// readers that have no key yet (a query service without one). Safe for
// concurrent use; immutable once built.
type Keys struct {
	keys [][]byte
	line Line
}

// New returns the Keys signing with keys[0] and verifying with each of
// keys, requiring a MAC from line on.
func New(keys [][]byte, line Line) (*Keys, error) {
	if len(keys) == 0 {
		return nil, errors.New("systemkey: no key")
	}
	for i, k := range keys {
		if len(k) < MinKeyBytes {
			return nil, fmt.Errorf("systemkey: key %d is %d bytes, want at least %d", i+1, len(k), MinKeyBytes)
		}
	}
	return &Keys{keys: keys, line: line}, nil
}

// ParseFile reads the keys of a CORREX_SYSTEM_KEY_FILE (see the package
// doc). The errors name the line, never the key.
func ParseFile(data []byte) ([][]byte, error) {
	var keys [][]byte
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if len(l) < MinKeyBytes {
			return nil, fmt.Errorf("line %d: a key of %d bytes, want at least %d (e.g. openssl rand -hex 32)", i+1, len(l), MinKeyBytes)
		}
		keys = append(keys, []byte(l))
	}
	if len(keys) == 0 {
		return nil, errors.New("no key (one key per line; the first signs, every one verifies)")
	}
	return keys, nil
}

// LoadFile reads and parses a CORREX_SYSTEM_KEY_FILE.
func LoadFile(path string) ([][]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("CORREX_SYSTEM_KEY_FILE: %w", err)
	}
	keys, err := ParseFile(data)
	if err != nil {
		return nil, fmt.Errorf("CORREX_SYSTEM_KEY_FILE %s: %w", path, err)
	}
	return keys, nil
}

// MAC returns HMAC-SHA256 under key of a record's key and value (see the
// package doc).
func MAC(key, recordKey, value []byte) []byte {
	m := hmac.New(sha256.New, key)
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(recordKey)))
	m.Write(n[:])
	m.Write(recordKey)
	m.Write(value)
	return m.Sum(nil)
}

// Sign sets r's Header to the MAC under the signing key (the first),
// replacing any it had. A nil k leaves r as it is.
func (k *Keys) Sign(r *kgo.Record) {
	if k == nil {
		return
	}
	mac := hex.AppendEncode(nil, MAC(k.keys[0], r.Key, r.Value))
	for i, h := range r.Headers {
		if h.Key == Header {
			r.Headers[i].Value = mac
			return
		}
	}
	r.Headers = append(r.Headers, kgo.RecordHeader{Key: Header, Value: mac})
}

// Verify reports whether r carries exactly one Header whose MAC verifies
// under one of the keys. A nil k verifies nothing.
func (k *Keys) Verify(r *kgo.Record) bool {
	if k == nil {
		return false
	}
	var got []byte
	n := 0
	for _, h := range r.Headers {
		if h.Key == Header {
			got, n = h.Value, n+1
		}
	}
	if n != 1 || len(got) != 2*sha256.Size {
		return false
	}
	want := make([]byte, sha256.Size)
	if _, err := hex.Decode(want, got); err != nil {
		return false
	}
	for _, key := range k.keys {
		if hmac.Equal(want, MAC(key, r.Key, r.Value)) {
			return true
		}
	}
	return false
}

// EventSigned reports whether an events-topic record at partition and
// offset must carry a MAC to be the system's (it is at or above the line).
func (k *Keys) EventSigned(partition int32, offset int64) bool {
	return k != nil && offset >= k.line.Events[partition]
}

// ChangelogSigned reports whether a changelog record at partition and
// offset must carry a MAC (it is at or above the line).
func (k *Keys) ChangelogSigned(partition int32, offset int64) bool {
	return k != nil && offset >= k.line.Changelog[partition]
}

// Line returns where signing starts.
func (k *Keys) Line() Line { return k.line }

// DecodeEvent decodes an events-topic record as the projector folds it:
// kafka.DecodeEvent's rule, and, at or above the line, a record whose
// eventId lies in the reserved space or that carries the system's origin
// header is refused with ErrForged unless its MAC verifies. With a nil k
// it is kafka.DecodeEvent.
func (k *Keys) DecodeEvent(r *kgo.Record, e *fsm.Event) error {
	if k == nil || !k.EventSigned(r.Partition, r.Offset) {
		return kafka.DecodeEvent(r, e)
	}
	if err := fsm.DecodeRecord(r.Value, e); err != nil {
		return err
	}
	if (e.ID.Reserved() || kafka.FromSystem(r)) && !k.Verify(r) {
		return fmt.Errorf("%w: event %s (%s)", ErrForged, e.ID, e.TypeName())
	}
	return nil
}

// stored is the value of the record in Topic.
type stored struct {
	Version   int       `json:"version"`
	Key       string    `json:"key"` // hex, 32 random bytes
	Line      Line      `json:"line"`
	CreatedAt time.Time `json:"createdAt"`
}

// Source is what Ensure needs to find or create the key's record.
type Source struct {
	Kafka kafka.Config
	// Events is the events topic, Changelog the changelog's ("" when off).
	Events, Changelog string
	// File holds the keys of CORREX_SYSTEM_KEY_FILE; when set, the stored
	// key is not used (only the line is).
	File [][]byte
	// Create lets Ensure create the topic and the record when there is
	// none (the projector); a reader that must not (the query service)
	// gets nil Keys then.
	Create bool
}

// Ensure returns the system's Keys: the record at the lowest offset of
// Topic(src.Events) (created first when there is none and src.Create),
// with src.File's keys instead of the stored one when set. adm and cl
// are the caller's admin client and a client able to produce.
func Ensure(ctx context.Context, adm *kadm.Client, cl *kgo.Client, src Source) (*Keys, error) {
	topic := Topic(src.Events)
	if src.Create {
		compact := "compact"
		if _, err := kafka.EnsureTopicConfigs(ctx, adm, topic, 1, map[string]*string{"cleanup.policy": &compact}); err != nil {
			return nil, err
		}
		if err := compacted(ctx, adm, topic); err != nil {
			return nil, err
		}
	}
	st, found, err := readFirst(ctx, adm, src.Kafka, topic)
	if err != nil {
		return nil, err
	}
	if !found {
		if !src.Create {
			return nil, nil
		}
		if err := create(ctx, adm, cl, src, topic); err != nil {
			return nil, err
		}
		if st, found, err = readFirst(ctx, adm, src.Kafka, topic); err != nil {
			return nil, err
		} else if !found {
			return nil, fmt.Errorf("systemkey: the record produced to %s is not there", topic)
		}
	}
	keys := src.File
	if len(keys) == 0 {
		k, err := hex.DecodeString(st.Key)
		if err != nil || len(k) < MinKeyBytes {
			return nil, fmt.Errorf("systemkey: the key stored in %s is not %d hex bytes", topic, MinKeyBytes)
		}
		keys = [][]byte{k}
	}
	return New(keys, st.Line)
}

// compacted refuses a topic whose records retention may delete: the first
// record, the key and the line, must stay for the life of the events log.
func compacted(ctx context.Context, adm *kadm.Client, topic string) error {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return fmt.Errorf("describe topic %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err == nil {
		err = rc.Err
	}
	if err != nil {
		return fmt.Errorf("describe topic %s: %w", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" && c.MaybeValue() != "compact" {
			return fmt.Errorf("systemkey: topic %s has cleanup.policy=%q: retention would delete the system key and the line; recreate it with cleanup.policy=compact", topic, c.MaybeValue())
		}
	}
	return nil
}

// create produces the first record: a random key, and the line at the
// events topic's and the changelog's current ends.
func create(ctx context.Context, adm *kadm.Client, cl *kgo.Client, src Source, topic string) error {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return err
	}
	line := Line{Events: map[int32]int64{}, Changelog: map[int32]int64{}}
	topics := []string{src.Events}
	if src.Changelog != "" {
		topics = append(topics, src.Changelog)
	}
	ends, err := adm.ListEndOffsets(ctx, topics...)
	if err != nil {
		return err
	}
	var bad error
	ends.Each(func(o kadm.ListedOffset) {
		switch {
		case o.Err != nil:
			if o.Topic == src.Events {
				bad = errors.Join(bad, fmt.Errorf("end offset of %s/%d: %w", o.Topic, o.Partition, o.Err))
			} // a changelog not created yet: its line is 0
		case o.Topic == src.Events:
			line.Events[o.Partition] = o.Offset
		default:
			line.Changelog[o.Partition] = o.Offset
		}
	})
	if bad != nil {
		return bad
	}
	v, _ := json.Marshal(stored{Version: 1, Key: hex.EncodeToString(k), Line: line, CreatedAt: time.Now().UTC()})
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	rec := &kgo.Record{Topic: topic, Partition: 0, Key: []byte("system-key/" + hex.EncodeToString(id)), Value: v}
	return cl.ProduceSync(ctx, rec).FirstErr()
}

// readFirst reads the first record of topic that decodes.
func readFirst(ctx context.Context, adm *kadm.Client, kc kafka.Config, topic string) (stored, bool, error) {
	ends, err := adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return stored{}, false, err
	}
	end, ok := ends.Lookup(topic, 0)
	if !ok {
		return stored{}, false, nil
	}
	if end.Err != nil {
		return stored{}, false, fmt.Errorf("end offset of %s: %w", topic, end.Err)
	}
	if end.Offset == 0 {
		return stored{}, false, nil
	}
	cl, err := kafka.NewClient(kc, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}),
		kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		return stored{}, false, err
	}
	defer cl.Close()
	for {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return stored{}, false, err
		}
		var ferr error
		fs.EachError(func(_ string, _ int32, err error) { ferr = errors.Join(ferr, err) })
		if ferr != nil {
			return stored{}, false, ferr
		}
		var st stored
		found, last := false, false
		fs.EachRecord(func(r *kgo.Record) {
			if found {
				return
			}
			last = last || r.Offset >= end.Offset-1
			d := json.NewDecoder(bytes.NewReader(r.Value))
			d.DisallowUnknownFields()
			if d.Decode(&st) == nil && st.Version == 1 && st.Key != "" {
				found = true
			}
		})
		if found {
			return st, true, nil
		}
		if last {
			return stored{}, false, nil
		}
	}
}

// String describes the line for logs.
func (l Line) String() string {
	var b strings.Builder
	for _, part := range []struct {
		name string
		m    map[int32]int64
	}{{"events", l.Events}, {"changelog", l.Changelog}} {
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(part.name)
		for p, o := range part.m {
			b.WriteString(" " + strconv.Itoa(int(p)) + ":" + strconv.FormatInt(o, 10))
		}
	}
	return b.String()
}
