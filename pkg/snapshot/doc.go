// Package snapshot owns the read model of a session and where it is kept: the
// Snapshot type (an fsm.Session plus its place in the log), its codecs, and
// the Redis store of snapshots and per-partition checkpoints.
//
// # The public store
//
// Store is the read model's store and nothing more: its methods are the
// contract that pkg/snapshot/snapshottest states and checks (snapshots,
// fenced writes, listings, counts, checkpoints, Reset), plus the Redis
// setup (Ping, WaitReplicas, WithTimeoutDefaults); TestStoreSurface holds
// it there. Its users take interfaces of their own, subsets of the
// contract, so that another store that passes snapshottest could serve
// them. What the projector keeps beside the snapshots (a parent's children,
// the change feed's outbox, armed deadlines, a lost partition's deletion
// and rebuild mark, the replication wait on Redis Cluster) is its own
// storage, internal/projector/projstore, which embeds this Store. The key
// names and the Lua scripts of both are internal/redislayout's, written
// once, internal so that they widen neither store; Buckets and Bucket are
// the part of that layout this package names.
//
// # Codecs
//
// Snapshots are stored in a compact, versioned binary form (AppendBinary,
// Decode); BenchmarkCodec measures it against JSON, and `make bench` prints
// both. The JSON form (MarshalJSON) is what the query API serves: the
// encoding of the wire.Snapshot that Wire builds, pkg/wire's type, which
// pkg/client decodes, so the shape is written once. EncodeJSON is a
// complete JSON form that Decode also reads: the same members and an
// "internal" one with the fold state the API hides. Both are deterministic:
// equal snapshots give equal bytes (testdata/json-v3.jsonl pins them).
//
// # Store layout and guarantees
//
// Keys (see internal/redislayout's keys.go) are per session, grouped into Buckets hash-tagged
// buckets; a bucket's sessions and its state index share one Redis Cluster
// slot, so the fencing script that writes a snapshot and moves it in the index
// never spans slots. Checkpoints of a topic live in one hash.
//
//   - Fencing: a snapshot replaces the stored one only if its position
//     (partition, offset) is greater; stale and equal positions lose. Replays
//     and zombie writers therefore cannot move a snapshot backwards.
//   - Checkpoints are monotonic: a lower offset never replaces a higher one.
//   - A batch is one pipelined round trip; retrying it leaves the same state.
//   - Listing by state and counting per state read the indexes, which the
//     fencing script keeps in step with the snapshots.
//   - Replicas (WaitReplicas): on a single server, a batch counts as
//     written once that many replicas acknowledged it (WAIT in its round
//     trip, else ErrNotReplicated). On Redis Cluster, where one WAIT cannot
//     cover writes spread over the masters, the writer waits for every
//     master's replicas after its writes (the projector does, with
//     internal/projector/projstore's MarkReplication and WaitReplicated).
//
// redis.Nil never leaves this package: a missing snapshot is ErrNotFound.
// The store's contract, as the projector and the query service rely on it,
// is written out and tested by pkg/snapshot/snapshottest, which runs it
// against this store on a single server, a cluster and miniredis.
//
// The store does not hand out its Redis client: a caller that needs Redis
// for something else keeps the client it gave NewStore.
package snapshot
