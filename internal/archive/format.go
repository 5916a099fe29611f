package archive

import (
	"bytes"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"time"

	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// Format is the version of the objects Put and PutStream write (the
// package doc gives its byte layout).
const Format = 2

// formatWhole is the version of the objects written as one JSON document,
// before Format 2: still read, written only by Encode.
const formatWhole = 1

// Format 2's sizes.
const (
	// ChunkBytes is the size past which the writer closes a chunk of
	// history entries: a page of the history reads about this much per
	// chunk it touches, and a writer holds one chunk.
	ChunkBytes = 256 << 10
	// TrailerLen is the length of a format 2 object's trailer.
	TrailerLen = len(`{"trailer":2,"head":,"footer":,"footerLen":}`+"\n") + 3*trailerDigits
	// TailBytes is how much of an object's end Head reads at once: the
	// trailer, and the footer with it when it fits.
	TailBytes = 64 << 10

	trailerDigits = 20
)

// ContentType is the content type of format 2 objects.
const ContentType = "application/x-ndjson"

// castagnoli is the CRC-32C table of the chunks' checksums.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// objectJSON is a format 1 object's bytes. historyComplete is written
// always; an object written before it existed reads as complete.
type objectJSON struct {
	Format          int                 `json:"format"`
	SessionID       string              `json:"sessionId"`
	ArchivedAt      time.Time           `json:"archivedAt"`
	HistoryComplete *bool               `json:"historyComplete,omitempty"`
	FirstVersion    uint64              `json:"firstVersion,omitempty"`
	EarliestOffset  *int64              `json:"earliestOffset,omitempty"`
	Snapshot        json.RawMessage     `json:"snapshot"`
	History         []wire.HistoryEntry `json:"history"`
}

// headJSON is a format 2 object's first line: objectJSON without the
// history.
type headJSON struct {
	Format          int             `json:"format"`
	SessionID       string          `json:"sessionId"`
	ArchivedAt      time.Time       `json:"archivedAt"`
	HistoryComplete *bool           `json:"historyComplete,omitempty"`
	FirstVersion    uint64          `json:"firstVersion,omitempty"`
	EarliestOffset  *int64          `json:"earliestOffset,omitempty"`
	Snapshot        json.RawMessage `json:"snapshot"`
}

// footerJSON is a format 2 object's index of its chunks.
type footerJSON struct {
	Entries int64       `json:"entries"`
	Chunks  []chunkJSON `json:"chunks"`
}

// chunkJSON is where one chunk is and what it holds.
type chunkJSON struct {
	At           int64  `json:"at"`
	Len          int64  `json:"len"`
	Entries      int64  `json:"entries"`
	FirstOffset  int64  `json:"firstOffset"`
	LastOffset   int64  `json:"lastOffset"`
	FirstVersion uint64 `json:"firstVersion"`
	CRC          uint32 `json:"crc32c"`
}

// trailer is a format 2 object's last line.
type trailer struct {
	head, footer, footerLen int64
}

func (t trailer) append(b []byte) []byte {
	return fmt.Appendf(b, `{"trailer":%d,"head":%*d,"footer":%*d,"footerLen":%*d}`+"\n",
		Format, trailerDigits, t.head, trailerDigits, t.footer, trailerDigits, t.footerLen)
}

// parseTrailer reads the trailer at the end of b (an object of size
// bytes ending with b); ok is false when b does not end with one (a format
// 1 object), err when it does and says something impossible.
func parseTrailer(b []byte, size int64) (t trailer, ok bool, err error) {
	if len(b) < TrailerLen {
		return t, false, nil
	}
	line := b[len(b)-TrailerLen:]
	if !bytes.HasPrefix(line, []byte(`{"trailer":`)) || line[len(line)-1] != '\n' {
		return t, false, nil
	}
	var v struct {
		Trailer   int   `json:"trailer"`
		Head      int64 `json:"head"`
		Footer    int64 `json:"footer"`
		FooterLen int64 `json:"footerLen"`
	}
	if err := json.Unmarshal(line, &v); err != nil {
		return t, true, fmt.Errorf("%w trailer: %v", errFormat, err)
	}
	if v.Trailer != Format {
		return t, true, fmt.Errorf("%w format %d, this build reads %d and %d", errFormat, v.Trailer, formatWhole, Format)
	}
	t = trailer{head: v.Head, footer: v.Footer, footerLen: v.FooterLen}
	if t.head <= 0 || t.footer < t.head || t.footerLen <= 0 || t.footer+t.footerLen+int64(TrailerLen) != size {
		return t, true, fmt.Errorf("%w trailer: head %d, footer %d+%d in an object of %d bytes", errFormat, t.head, t.footer, t.footerLen, size)
	}
	return t, true, nil
}

// encodeHead returns the head line of o (with its newline).
func encodeHead(o *Object) ([]byte, error) {
	snap, err := snapshot.EncodeJSON(o.Snapshot)
	if err != nil {
		return nil, err
	}
	v := headJSON{Format: Format, SessionID: o.Snapshot.ID, ArchivedAt: o.ArchivedAt.UTC(), Snapshot: snap}
	complete := o.HistoryComplete()
	v.HistoryComplete = &complete
	if !complete {
		v.FirstVersion, v.EarliestOffset = o.FirstVersion(), &o.Truncated.EarliestOffset
	}
	b, err := json.Marshal(v)
	return append(b, '\n'), err
}

// decodeHead reads a head line into a Head (without its index).
func decodeHead(b []byte) (*Head, error) {
	var v headJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w head: %v", errFormat, err)
	}
	if v.Format != Format {
		return nil, fmt.Errorf("%w head: format %d in a format %d object", errFormat, v.Format, Format)
	}
	var s snapshot.Snapshot
	if err := s.UnmarshalJSON(v.Snapshot); err != nil {
		return nil, fmt.Errorf("%w of %s: %v", errFormat, v.SessionID, err)
	}
	h := &Head{Snapshot: &s, ArchivedAt: v.ArchivedAt, Format: Format}
	if v.HistoryComplete != nil && !*v.HistoryComplete {
		h.Truncated = &Truncation{}
		if v.EarliestOffset != nil {
			h.Truncated.EarliestOffset = *v.EarliestOffset
		}
	}
	return h, nil
}

// decodeFooter reads a footer and checks that its chunks tile the object
// from the head's end to the footer, in the history's order.
func decodeFooter(b []byte, t trailer) ([]chunkJSON, int64, error) {
	var f footerJSON
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, 0, fmt.Errorf("%w footer: %v", errFormat, err)
	}
	at, n := t.head, int64(0)
	for i, c := range f.Chunks {
		// An entry is a JSON object on a line of its own, "{}\n" at the
		// least (the last one's newline may be missing): a chunk claiming
		// more than its bytes can hold would have the readers reserve room
		// for entries that are not there.
		if c.At != at || c.Len <= 0 || c.Len > t.footer-at || c.Entries <= 0 || c.Entries > (c.Len+1)/3 || c.LastOffset < c.FirstOffset ||
			(i > 0 && c.FirstOffset < f.Chunks[i-1].LastOffset) {
			return nil, 0, fmt.Errorf("%w footer: chunk %d (%+v) does not follow the one before", errFormat, i, c)
		}
		at += c.Len
		n += c.Entries
	}
	if at != t.footer || n != f.Entries {
		return nil, 0, fmt.Errorf("%w footer: the chunks end at %d with %d entries, the footer at %d with %d",
			errFormat, at, n, t.footer, f.Entries)
	}
	return f.Chunks, f.Entries, nil
}

// decodeChunk reads a chunk's entries, checking its checksum first: a
// mismatch is ErrChanged, since the footer it was found by belongs to
// other bytes.
func decodeChunk(b []byte, c chunkJSON) ([]wire.HistoryEntry, error) {
	if int64(len(b)) != c.Len || crc32.Checksum(b, castagnoli) != c.CRC {
		return nil, ErrChanged
	}
	out := make([]wire.HistoryEntry, 0, c.Entries)
	for line := range bytes.Lines(b) {
		var e wire.HistoryEntry
		if err := json.Unmarshal(line, &e); err != nil {
			return nil, fmt.Errorf("%w chunk at %d: %v", errFormat, c.At, err)
		}
		out = append(out, e)
	}
	if int64(len(out)) != c.Entries {
		return nil, fmt.Errorf("%w chunk at %d: %d entries, the footer says %d", errFormat, c.At, len(out), c.Entries)
	}
	return out, nil
}

// Encode returns an object's bytes in format 1, one JSON document: the
// form objects had before format 2, which the readers still take. Put
// writes format 2.
func Encode(o *Object) ([]byte, error) {
	snap, err := snapshot.EncodeJSON(o.Snapshot)
	if err != nil {
		return nil, err
	}
	h := o.History
	if h == nil {
		h = []wire.HistoryEntry{}
	}
	v := objectJSON{Format: formatWhole, SessionID: o.Snapshot.ID, ArchivedAt: o.ArchivedAt.UTC(), Snapshot: snap, History: h}
	complete := o.HistoryComplete()
	v.HistoryComplete = &complete
	if !complete {
		v.FirstVersion, v.EarliestOffset = o.FirstVersion(), &o.Truncated.EarliestOffset
	}
	return json.Marshal(v)
}

// Decode reads an object's bytes, of either format.
func Decode(b []byte) (*Object, error) {
	t, ok, err := parseTrailer(b, int64(len(b)))
	if err != nil {
		return nil, err
	}
	if !ok {
		return decodeWhole(b)
	}
	h, err := decodeHead(b[:t.head])
	if err != nil {
		return nil, err
	}
	chunks, n, err := decodeFooter(b[t.footer:t.footer+t.footerLen], t)
	if err != nil {
		return nil, err
	}
	o := &Object{Snapshot: h.Snapshot, ArchivedAt: h.ArchivedAt, Truncated: h.Truncated, History: make([]wire.HistoryEntry, 0, n)}
	for _, c := range chunks {
		es, err := decodeChunk(b[c.At:c.At+c.Len], c)
		if err != nil {
			if err == ErrChanged {
				err = fmt.Errorf("%w chunk at %d: its checksum does not match", errFormat, c.At)
			}
			return nil, err
		}
		o.History = append(o.History, es...)
	}
	return o, nil
}

// decodeWhole reads a format 1 object.
func decodeWhole(b []byte) (*Object, error) {
	var v objectJSON
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, fmt.Errorf("%w: %v", errFormat, err)
	}
	if v.Format != formatWhole {
		return nil, fmt.Errorf("%w format %d, this build reads %d and %d", errFormat, v.Format, formatWhole, Format)
	}
	var s snapshot.Snapshot
	if err := s.UnmarshalJSON(v.Snapshot); err != nil {
		return nil, fmt.Errorf("%w of %s: %v", errFormat, v.SessionID, err)
	}
	o := &Object{Snapshot: &s, History: v.History, ArchivedAt: v.ArchivedAt}
	if v.HistoryComplete != nil && !*v.HistoryComplete {
		o.Truncated = &Truncation{}
		if v.EarliestOffset != nil {
			o.Truncated.EarliestOffset = *v.EarliestOffset
		}
	}
	return o, nil
}
