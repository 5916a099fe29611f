// Package archive owns where closed sessions go when they leave Redis
// (docs/retention.md): one object per session in a bucket
// (internal/archive/objstore: file:// for make run, mem:// in tests; s3://
// for any S3-compatible store and gs://, through gocloud.dev/blob, from
// internal/archive/cloudblob), its format, and the listing of archived
// sessions by id prefix.
//
// This package and objstore link the standard library's file system only.
// The s3:// and gs:// buckets, and with them gocloud.dev, gRPC and the AWS
// and Google Cloud SDKs, come from internal/archive/cloudblob, which the
// service binaries import; a program that does not (pkg/testkit) gets a
// clear error from Open for those URLs.
//
// An object holds the session's final snapshot (the stored JSON form,
// snapshot.EncodeJSON) and its whole history (wire.HistoryEntry, as GET
// /v1/sessions/{id}/history answers it), or, when the events log no longer
// held the session's first events when it was archived, says so
// ("historyComplete": false, the "firstVersion" it holds and the log's
// "earliestOffset" then; docs/retention.md, "The object"). Its key carries what a listing
// shows, so that listing reads no object:
//
//	sessions/<sessionId>/<STATE>/<endedAt, Unix nanoseconds>.json
//
// A session id never contains '/' (fsm.ValidSessionID), so the keys of one
// session are exactly those under "sessions/<sessionId>/". Writing the
// same session again (a sweep retried after a crash) writes the same key
// with the same bytes when nothing changed.
//
// # Format 2: an object read by range
//
// Put and PutStream write format 2 (content type application/x-ndjson):
// newline-delimited JSON, one value a line, in four parts:
//
//	head     {"format":2,"sessionId":...,"archivedAt":...,"historyComplete":...,
//	          ["firstVersion":...,"earliestOffset":...,]"snapshot":{...}}\n
//	chunks   {history entry}\n{history entry}\n...   chunk 0
//	         {history entry}\n...                     chunk 1, ...
//	footer   {"entries":N,"chunks":[{"at":A,"len":L,"entries":n,"firstOffset":F,
//	          "lastOffset":T,"firstVersion":V,"crc32c":C}, ...]}\n
//	trailer  {"trailer":2,"head":H,"footer":O,"footerLen":FL}\n
//
// The trailer is TrailerLen bytes whatever the numbers: each is written
// right-aligned in 20 columns with leading spaces, which JSON allows
// between tokens. H is the head's length (so the first chunk starts at H),
// O and FL where the footer starts and how long it is; the trailer follows
// it and ends the object. A chunk is the entries the writer gathered until
// they passed ChunkBytes (the last one may be smaller), never empty, in
// the history's order (the log's: offsets never decrease); its footer entry
// says where it is (at, len), how many entries it holds, the first and
// last of their offsets, the first's version, and the CRC-32C (Castagnoli)
// of its bytes. The chunks follow one another from H to O.
//
// A reader therefore needs, for a session's snapshot and index (Head): the
// listing it does anyway to find the key (which gives the object's size),
// one range read of the object's last TailBytes (the trailer, and the
// footer when it fits there, as it does up to about a thousand chunks),
// one of the head; and for a page of the history (HistoryPage), one range
// read per chunk the page touches, found in the footer by offset. A range
// read whose object is not the size the head was read from, or a chunk
// whose CRC does not match, is ErrChanged: the object was written again
// since (a sweep retried with a late event), and its head must be read
// again. No reader needs the whole object, and no writer holds it: the
// writer streams each full chunk to the bucket and keeps only the footer.
//
// Format 1, written before, is one JSON document, {"format":1, ...,
// "snapshot":{...},"history":[...]}. Get, Head and HistoryPage read it
// still; Head and HistoryPage read such an object whole (Head keeps its
// history, so that the pages after it read nothing more). Encode writes
// it, for the tests and benchmarks that compare the formats.
package archive
