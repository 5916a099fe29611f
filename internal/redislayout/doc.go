// Package redislayout is how the session read model is laid out in Redis:
// the key names under a prefix (Keys, Buckets, Bucket), the Lua scripts
// that write and read them, and Run, which runs a pipeline of script calls
// and loads the scripts again where Redis lost them.
//
// Two stores share the layout, each over its own part of the keys:
// pkg/snapshot's Store (snapshots, state indexes, checkpoints: the public
// contract, pkg/snapshot/snapshottest) and the projector's own storage,
// internal/projector/projstore (children index, outbox, armed deadlines,
// replication markers, a partition's deletion and rebuild mark, ownership
// epochs and tombstones). The
// layout is here, apart from both and internal, so that each key name and
// each script is written once while none of them widens pkg/snapshot's
// public API: pkg/snapshot imports this package, and projstore imports
// both. pkg/snapshot's Reset deletes every key Keys.Owns, the projector's
// included.
package redislayout
