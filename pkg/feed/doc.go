// Package feed reads the change feed of correx-sessions: the topic
// "<events topic>.changes" that the projector writes in each flush, after
// the snapshots and before the checkpoint (docs/exactly-once.md). It holds
// one record per applied transition, per rejected event and per applied
// custom event, keyed by session id on the session's partition (the
// partition of the session's events), so a session's changes are in order
// on one partition.
//
// The feed is written at least once: after a projector crash, records of the
// replayed range are written again, byte-identical, so (SessionID, Position)
// is the idempotency key of a change. Change, AppendJSON and Decode are the
// record's wire form (pkg/wire's, which imports only the standard library,
// for a program that reads changes without Kafka); Consumer reads the feed with its own consumer group and
// its own checkpoint in Redis, and drops what it has already handled.
//
// # Delivery contract of Consumer
//
// The guarantee is: every change reaches the handler at least once, in order
// per session, and a change the handler accepted (returned nil for) is not
// handed to it again unless the checkpoint write after it failed. Argued in
// the order of the steps that keep it:
//
//   - The checkpoint of a changes-topic partition is one Redis hash
//     ("<prefix>:feed:<group>:<changes topic>:<partition>") holding next,
//     the changes-topic offset to read next, and per session the Position
//     of the last change handled. They are different things: a record the
//     projector wrote again after a crash has a new changes-topic offset,
//     but its Position is the one already handled.
//   - On assignment (a consumer group; several instances share the
//     partitions) each partition is started at its Redis checkpoint's next,
//     never at the Kafka committed offset; with no checkpoint at the
//     earliest offset, or with StartAt(Latest) at the end of the log, which
//     is then stored as the checkpoint at once so a restart does not move
//     it.
//   - The feed is in order per session, and a session's events are on one
//     events partition, so a session's first-written changes arrive with
//     increasing Position.Offset. A change whose Position is at or below its
//     session's last handled Position is therefore a duplicate (re-read
//     after this consumer's restart, or written again after a projector
//     crash) and is dropped; the others are new, and in order. The
//     sessions' positions are read from Redis in one round trip per fetch
//     and kept in memory while the partition is owned.
//   - The checkpoint is written after the handler returns nil for a change
//     (one Redis round trip per handled change, on a context that outlives
//     Run's, so a change handled before a shutdown is not handed out
//     again). A crash between the handler's return and the write hands
//     that one change again after a restart: at least once, so a handler
//     with side effects makes them idempotent by Change.Key.
//   - The write is a compare-and-set on next (a Lua script): a member that
//     lost its partition and still writes cannot move the checkpoint back.
//   - A handler error stops Run: it returns a *HandlerError, the change is
//     not checkpointed, and the next Run (of this or another instance)
//     starts with it. Retrying belongs in the handler, which knows which
//     failures are worth retrying (examples/webhook retries 5xx with
//     backoff).
//   - Changes a Filter refuses are not handed to the handler but count as
//     handled: they move the checkpoint.
//
// Kafka offsets are committed too, after the checkpoint, only so that lag
// tools see the group's progress.
//
// The checkpoint grows by one hash field per session ever handled (the
// session id and about 12 bytes), and so does an instance's memory for the
// sessions of the partitions it owns: a session's field must outlive any
// record of it the projector may write again, which no time bounds.
//
// A checkpoint ahead of the end of its partition means the changes topic
// was recreated or truncated: Run stops with ErrCheckpointAhead rather than
// silently skipping changes. Delete the checkpoint key
// ("<prefix>:feed:<group>:<changes topic>") to start again.
//
// The handler is called from one goroutine, one change at a time, across
// all the partitions of an instance.
package feed
