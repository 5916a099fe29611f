// Package sessionlog owns reading sessions' records back from the events
// log, outside any consumer group: one session's records (the query
// service's replay and history), the histories of a batch of sessions of
// a partition (the projector's archive sweep), a partition read forward a
// little at a time on one connection (Cursor: the projector's background
// verifier), and the history entry that says what the fold did with each
// (GET /v1/sessions/{id}/history, and the archive's objects).
//
// # Memory
//
// A read holds what it is folding, never a partition or a session whole:
//
//   - Each fetch of a read is at most FetchBytes (256 KiB, as the broker
//     stores the records: compressed), one in flight, so a read holds about
//     two fetches decoded. Before the bound a read took the client's
//     defaults, up to 50 MiB a fetch.
//   - Reader.Histories holds at most a byte budget of history entries at
//     once (DefaultHistoryBudget, 8 MiB: about 30,000 entries of about 256
//     bytes each). Sessions whose histories are expected to fit together
//     (their Counters.Events entries) are read in one pass over the
//     partition; a session whose history alone would pass the budget, or
//     that a pass finds passing it, is read again alone, its entries
//     handed out one at a time as they are folded (History.Each), for a
//     writer that streams them (archive.Remote.PutStream). The budget
//     trades passes for memory: a round of 500 sessions of 1,000 events
//     each (about 128 MB of entries) is 16 passes instead of one.
//
// Measured by the projector's BenchmarkSweepHuge (one session, its history
// read from kfake and its entries dropped; the heap the collector found
// live above what was live before): 200,000 events, 55 MiB held in one
// pass, 11.5 MiB streamed; 400,000 events, 98 MiB in one pass, 10.8 MiB
// streamed. What the streamed read holds does not grow with the session:
// two decoded fetches (about 7 MiB of kgo records and decompressed
// batches for these records) and one session's fold.
//
// # Exactness
//
// A history is whole or says it is not (docs/retention.md, "The object"). A session whose
// first offset is before the log's start when Histories begins is handed
// over incomplete, without a read. A read that does not find a session's
// first record at its first offset (the start moved past it during the
// read, and the client went on from the new start) fails with
// ErrFirstRecordGone, so that no shorter history is ever called complete.
// A range that ends past the log's end is ErrBeyondLog, read as far as the
// log goes, never a wait for records that are not there.
package sessionlog
