// Package projector is the consumer group that folds session events into
// snapshots in Redis, with every event's effect shown exactly once.
//
// # How exactly-once effect is kept
//
// Kafka delivers at least once. The projector makes replays harmless:
//
//   - Every snapshot carries the (partition, offset) of the last record
//     folded into it. A record at or below that position is skipped, and the
//     store replaces a snapshot only with a higher position (fencing inside
//     Redis), so replays and zombie writers cannot move anything backwards.
//   - Dirty snapshots are written in one pipelined, fenced batch; only then
//     is the partition's checkpoint (the next offset) written, after the
//     dead-letter records of that range are acknowledged; then the Kafka
//     offset is committed (for lag tools only).
//   - On assignment a partition starts at its Redis checkpoint, not at the
//     Kafka committed offset; with no checkpoint it starts at the earliest
//     offset (a full rebuild).
//   - A checkpoint that was stored and is gone, or is stored lower than the
//     one this projector wrote, means Redis lost the read model (emptied, or
//     gone back in time: a lagging replica promoted, a restart from an older
//     file): the partition's snapshots are deleted and it is rebuilt from
//     the earliest offset (a snapshot folded after the loss may lack the
//     history Redis lost, and the skip rule would protect it). The
//     checkpoint script writes nothing over such a hole. A flush notices
//     when it writes the checkpoint; an idle projector checks the stored
//     checkpoints every MaxFlushInterval; /readyz reports the partition
//     until its rebuild reaches the log's end as it was when it began.
//   - A loss is noticed only by a checkpoint write that expects one, so
//     one is always expected: a partition with no checkpoint gets 0 stored
//     before its first record is folded (startCheckpoints). And the
//     rebuild is stored before anything is deleted: the checkpoint is put
//     back to 0 with a mark (the log's end when the rebuild began), then
//     the partition's snapshots and deadlines are deleted, then the reset
//     is read back (Redis emptied or sent back to a copy without it in the
//     meantime would leave no checkpoint, or an older one over the deleted
//     snapshots: the reset and the deletes are done again), then it is
//     folded from 0. A restart anywhere in a rebuild thus folds from 0,
//     never from an older checkpoint over deleted snapshots; a checkpoint
//     still at 0 with the mark means the deletes may be unfinished, and
//     the new owner does them again; the first checkpoint at or past the
//     mark removes it (projstore.Store.ResetCheckpoint).
//   - With RedisWaitReplicas, a batch counts as written only once that many
//     replicas acknowledged it, so a checkpoint never passes writes a
//     failover could lose (docs/guarantees.md says what each Redis
//     deployment guarantees). On a single server the snapshot writes wait
//     (Redis WAIT in their round trip). On Redis Cluster, before the
//     checkpoints, every master waits for its replicas behind a write of
//     its own (covering all of the batch's writes on it), and a master
//     that changed since the previous batch's wait (died, its replica
//     promoted) makes the batch be written again first, since writes it
//     took may be gone with it.
//   - A crash anywhere (before, during or after a batch, before the
//     checkpoint) leaves snapshots at or ahead of the checkpoint; the restart
//     replays from the checkpoint and skips what is already reflected. A
//     graceful stop whose writes cannot complete (Redis unreachable) is
//     such a crash after Config.ShutdownTimeout: Run returns
//     ErrShutdownTimeout instead of retrying until Redis is back.
//   - The skip rule compares positions within one partition, so it holds
//     only if a session's position moves along its own partition. A record
//     that is not on its key's partition (murmur2 of the key modulo the
//     topic's partition count) is set aside as wrong_partition before it
//     reaches the session: it never moves a position, so it cannot fence the
//     session's later events, and setting it aside again on a replay changes
//     nothing. The count is read when the topic is ensured at start, again
//     when an assigned partition lies beyond it, and again at most every 10 s
//     when a record looks misplaced, so a grown topic is noticed.
//   - A dead letter is produced before the checkpoint that passes its record
//     (the flush waits for the produce): a crash before the checkpoint
//     replays the record and produces it again, so a dead letter is written
//     at least once (a replay can write it twice). It is a bounded excerpt
//     of the record (deadLetterRecord), far under any broker's limit, so a
//     record of any size is set aside. A produce error that retrying cannot
//     cure because of what the record is (refused) is logged, counted
//     (Observer.DeadLetterFailed) and skipped: it would fail the same way on
//     every restart. Any other produce error fails the batch: the
//     checkpoint is not written and a restart replays the record.
//   - The change feed and the derived events (replacement linking and
//     cancellation reaching children, docs/lifecycle.md:
//     SessionReplaced for a successor's predecessor, ReplacementLinked or
//     ReplacementRefused back to the successor, CancellationRequested for
//     the children of a session that enters CANCELLING, COMPLETED, FAILED
//     or CANCELLED) are
//     written at least once, a session's feed records in its events'
//     order. A feed record written again is byte-identical, and a derived
//     event written again is a duplicate of the first (its id is derived
//     from its type, its session and the event it comes from, its
//     occurredAt is that event's): every byte is a function of the source
//     record and of what the fold did with it, which the fold makes
//     deterministic. A batch stores what the fold did with each of these
//     records (a few bytes each) in the topic's outbox in Redis before its
//     snapshots, produces the records after the snapshots, and its
//     checkpoints wait for the produce (any produce error fails the batch).
//     A crash before the snapshots are stored replays the events, and the
//     fold builds the same records again. A crash after it makes the replay
//     skip the events the stored snapshots reflect, so the fold cannot tell
//     what they did: the partition's outbox, loaded on assignment from its
//     checkpoint on, tells it, and each skipped record found there is built
//     again in its place in the fold order. Nothing is lost, and what is
//     written twice is a duplicate by (sessionId, position) for the feed
//     and by event id for derived events. A SessionReplaced for a session
//     that does not exist is not a dead letter: its successor gets
//     ReplacementRefused "unknown_predecessor".
//   - A child is cancelled even when it is created on another partition,
//     by another projector, at the moment its parent ends: a child's
//     creation adds it to its parent's children index in Redis before
//     reading its parent's snapshot, and a parent's end is stored (its
//     snapshot) before its children index is read, both after the batch's
//     snapshots and before its checkpoint, so whichever comes second sees
//     the other. A child cancelled both ways gets the same event id twice.
//     A child that ends is removed from its parent's index at the same
//     point of the write (after the snapshots, before the checkpoint; a
//     replay removes it again, which changes nothing), after the batch's
//     additions, so a child created and ended in one batch is not left in.
//   - A cascade reaches every child, however many, in bounded memory: it
//     reads the index in SSCAN pages and the children's snapshots 256 at a
//     time (derived.reach), handing each page's cancellations to the Kafka
//     client before reading the next. Its progress is stored nowhere, and
//     need not be: a crash in the middle of a cascade happens before the
//     batch's checkpoint, so the restart folds the parent's ending event
//     again (or, its snapshot being stored, finds its outcome in the
//     outbox) and runs the whole cascade again from the first page. That
//     is idempotent, since a child whose cancellation was folded is
//     CANCELLING and is skipped, and one whose cancellation is still in the
//     log gets the same event (same id) again, a duplicate; and it is
//     bounded, since the pass reads the same bounded pages, over an index
//     that holds no ended child, so memory does not grow with retries and
//     an interrupted cascade cannot turn into a crash loop.
//   - The snapshot changelog (Config.ChangelogEnabled, docs/exactly-once.md)
//     makes a lost read model cost its sessions, not its history.
//     A write produces its snapshots to the compacted
//     "<topic>.snapshots" (internal/changelog owns the record format),
//     each on its session's events partition, after the acknowledged step
//     (so the change feed records, derived events and dead letters of
//     what a changelog snapshot reflects are acknowledged: a restore
//     loses the outbox with Redis and skips what its snapshots reflect),
//     and waits for their acknowledgement (crash point after-changelog);
//     then the Redis checkpoints (after-checkpoint); then one checkpoint
//     record per partition it stored (after-changelog-checkpoint), which
//     the next write's acknowledged step waits for. So a changelog
//     checkpoint never runs ahead of its snapshots: a crash before it
//     leaves the changelog's checkpoint behind, which costs a longer fold,
//     never a gap. Only snapshots folded while Redis held the read model
//     reach it: before producing, the write reads the partitions' stored
//     checkpoints, and a partition whose checkpoint is gone or lower than
//     the one this projector knows (what the checkpoint write would call
//     lost) gets nothing produced and no checkpoint written, and is
//     rebuilt; a snapshot folded over what Redis lost (a duplicate
//     SessionCreated of an evicted session, a newer event over an older
//     copy) is folded after the loss, so before that read. Nor does a
//     snapshot Redis refused because its session was archived meanwhile
//     (the fold held a copy while the sweep removed it): past the
//     archived record, it would be what a restore keeps of the session.
//   - Wherever a partition would fold from offset 0 (a rebuild, a
//     partition with no checkpoint, a rebuild resumed at 0), it is
//     restored from the changelog when the changelog has a checkpoint
//     for it: the partition of the changelog is read to its end as it
//     was when the read began, keeping the latest record of each key
//     (changelog.Latest: a snapshot only at a higher position, so an
//     older one a zombie writes later loses; a session whose last record
//     says it was archived is not written back); the snapshots are
//     written fenced, in chunks, their deadlines armed and the open
//     children linked to their parents, then the changelog's checkpoint
//     is stored as the partition's and the events topic folded from it.
//     Each kept snapshot reflects every event of its session below the
//     checkpoint, and what it reflects beyond it was fully written out, so
//     the fold from the checkpoint, skipping what the snapshots reflect,
//     ends where the uninterrupted fold does. The rebuild's durability
//     order is kept: the checkpoint is reset to 0 with the mark first,
//     the partition deleted, the reset read back, then the restore
//     written (crash point restore-written: a restart finds 0 with the
//     mark, deletes again and restores again), then its checkpoint
//     stored expecting the reset and read back (Redis lost meanwhile: the
//     restore starts over; crash point restore-checkpoint: a restart
//     folds from it like from any checkpoint). A changelog checkpoint
//     beyond the events log's end (the topic was recreated) stalls the
//     partition like a Redis checkpoint beyond it; one older than the
//     log's start (finite retention) restores anyway and raises the alert
//     (/readyz names the partition, correx.projector.restore_gaps counts
//     it). Pitfalls: compaction may remove a key's old values and, after
//     delete.retention.ms, its tombstones, so the topic is created with
//     delete.retention.ms far above the longest restore (7 days) and an
//     archived session's last record says so rather than being deleted;
//     and a checkpoint record is never produced before the snapshots it
//     covers are acknowledged, so no checkpoint points past what
//     compaction keeps. One projector deployment (one Redis) writes a
//     topic's changelog: two writing it with different progress could
//     leave, after compaction, an older snapshot under a newer checkpoint.
//
// # How deadlines are never lost and never doubled
//
// A session's armed deadlines (docs/timeouts.md) are a pure function of its
// snapshot and the service defaults (fsm.NextDeadline); the projector stores
// the earliest one per session, with the version V it was armed at, in a
// per-partition deadline store in Redis (projstore.Store.ArmDeadlines), and
// fires it from there (firer.go):
//
//   - Armed with the snapshot: each write stores the deadline of every
//     snapshot of the batch (arm, re-arm, or disarm when terminal or
//     nothing is armed) after the snapshots and before the checkpoints.
//     A crash before the deadline write leaves the checkpoint behind, so the
//     restart replays the range; a replayed record that its stored snapshot
//     already reflects still marks the snapshot dirty (folder.fold), so
//     the next batch arms its deadline again. None is only in memory.
//   - Fenced by version: an entry is replaced or removed only by a write of
//     the same or a newer version, so a replay or a zombie cannot put an
//     older deadline over a newer one. An older one written after the entry
//     was removed is harmless: see "superseded" below.
//   - Fired at least once: the partition's owner reads the due entries,
//     produces each TimeoutExpired and waits for the acknowledgement, and
//     only then takes the entry out of what is due, and only if it still
//     holds what was fired (the same version, kind and time). A crash, a
//     revocation or an error before that leaves the entry, and the next
//     owner fires it again.
//   - In effect once: the record's eventId is derived from (sessionId,
//     kind, V), so a second firing is a duplicate for the fold; and once one
//     is applied the session is at V+1, so any firing armed at V is
//     superseded (the fold's first rule after the duplicate check), as is a
//     deadline that fired while an event that moved the session was already
//     in the log. occurredAt is the deadline, never the wall time, so the
//     replay of a timeout gives the same snapshot.
//   - Never fired twice at one version in a loop: a TimeoutExpired that the
//     fold does not apply (a duplicate, a rejection) leaves the session at
//     V, and each later write of the session arms the same deadline again.
//     The fired entry stays in the store marked fired until a newer version
//     re-arms or disarms the session, and arming exactly what was fired
//     does nothing (projstore.Store.RemoveFired, ArmScript), so it is not
//     due again. Every kind armed in a state is one the table applies there
//     (fsm.Deadlines: execution is not armed in CANCELLING), and no client
//     can take a timeout's id first (see "Ids the system derives"), so
//     with correct input the mark is never needed; it is the bound for
//     the rest.
//   - Never late by design: the firer of each partition sleeps until the
//     partition's next deadline, which each write reports (flusher →
//     firer.hint), and reads it again from Redis every DeadlineResync (1 s),
//     which covers deadlines armed by a previous owner.
//   - Nothing from a fold of the past: a partition fires nothing until its
//     fold has caught up with the end of the log as it was at assignment
//     or at its rebuild's start (firer.hold, released by the checkpoints'
//     writes), so a fold from the log's start does not fire the past
//     deadlines of states its sessions left long ago.
//
// # Ids the system derives
//
// Every event the projector and the firer produce carries an id derived
// from what it comes from (TimeoutEventID, derivedID, both through
// fsm.DeriveEventID), so producing it again is a duplicate for the fold.
// Those ids lie in a part of the UUID space reserved for them
// (fsm.EventID.Reserved), and the records carry the header
// correx-origin: system (kafka.SystemHeader). Ingest refuses a reserved
// eventId from a client; a record from another producer that carries one
// without the header is set aside as reserved_event_id before it is
// folded (kafka.DecodeEvent in folder.process, classify), and the
// query service's replay skips it by the same function. So nothing but
// the system can put one of its ids in a session's duplicate window first,
// which would make a timeout or a derived event a duplicate, never applied
// (docs/lifecycle.md, "Event ids").
//
// The header is a constant anyone who writes to the topic can set, so the
// system's records are also signed (docs/security.md, internal/systemkey): the
// firer, the derived events' and the cascade's produce steps and every
// changelog produce set correx-mac, the HMAC-SHA256 under the system key
// of the record's key and value. Run loads the key (systemAuth.start, sysauth.go)
// before any partition is folded, and what signs waits for it. From the
// line on (each partition's end offset when the key was created), a record
// with a reserved id or the system's header is folded only when its MAC
// verifies, otherwise it is set aside as forged_system_event
// (systemkey.Keys.DecodeEvent in folder.process; the archive's
// histories skip it by the same function); below the line, records are
// read as before.
//
// # Where each guarantee lives
//
//   - The skip rule: folder.fold (fold.go), through
//     snapshot.Snapshot.Fold; the fencing is the store's (pkg/snapshot).
//   - The order of a write (outbox, snapshots fenced, deadlines, derived
//     records and the cascade, dead letters and derived records
//     acknowledged, the changelog's snapshots acknowledged, replicas on
//     Redis Cluster, checkpoints, the changelog's checkpoint records,
//     Kafka offsets)
//     and the crash points between the steps: writeSteps, the ordered
//     list flusher.write runs (flush.go), pinned by TestWriteOrder; the
//     wait for the Cluster masters' replicas and the batch written again:
//     flusher.markReplication and flusher.replicated, over
//     projstore.Store.MarkReplication and WaitReplicated. What a written
//     batch made durable (a snapshot's stored position, a partition's
//     stored checkpoint) is recorded only afterwards, by flusher.finish,
//     from the fold goroutine.
//   - Only stored snapshots are evicted: cache.evict and entry.evictable
//     (cache.go); the dirty set is cache.takeDirty's.
//   - Which checkpoint a partition may write, and whether one is expected
//     to be stored: partState.checkpoint (partition.go).
//   - Starting at the Redis checkpoint (0 stored first where none is),
//     stalling a partition whose checkpoint is beyond the log, rebuilding
//     after a vanished checkpoint, resuming a rebuild cut short, and the
//     idle check: recovery's adjustOffsets, startCheckpoints, rebuild,
//     checkCheckpoints (recovery.go).
//   - Writing what is revoked before giving it up, and dropping what is
//     lost without writing: group.onRevoked, onLost (group.go).
//   - Setting records aside, on their key's partition or not: deadLetters.send,
//     classify (deadletter.go), partitioning.onKeyPartition
//     (partitioning.go); a
//     reserved id without the system's header: kafka.DecodeEvent
//     (internal/kafka/origin.go).
//   - Which deadlines a session has: fsm.Deadlines and fsm.NextDeadline;
//     writing them in a batch, between the snapshots and the checkpoints:
//     deadlinesOf and flusher.armDeadlines (deadlines.go), called by the
//     deadlines step of flusher.write; the version fencing and the guarded removal:
//     redislayout's ArmScript and FiredScript, which marks what was
//     fired (internal/projector/projstore/deadlines.go).
//   - Firing, per owned partition, started and stopped with ownership, and
//     the deterministic TimeoutExpired (occurredAt, eventId): firer,
//     timeoutRecord and TimeoutEventID (firer.go); the re-arm of replayed
//     snapshots: folder.fold.
//   - The change feed and the derived events: which outcomes get a feed
//     record, derived.add, and its bytes, change.appendJSON (changes.go,
//     feed.Change.AppendJSON from the session's label list); which events
//     derive from which, their ids and records, reactionOf, derivedID,
//     reaction.record (reactions.go); the outbox before the snapshots and the produce
//     after them, derived.persist, encode and produce, called by
//     flusher.write and its steps; loading the outbox on assignment, derived.read and
//     load, called by adjustOffsets; building a skipped record again,
//     derived.skipped, called by folder.fold (changes.go); children and
//     their cancellation, familyOf, derived.cascade, reach and cancelPage
//     (cascade.go) with projstore.Store.AddChildren, RemoveChildren and
//     ChildrenPages; the outbox's
//     storage, projstore.Store.PutOutbox; feed records on their source
//     partition, feedRecord and kafka.PartitionerKeepingPartitions.
//   - The snapshot changelog: its record format, changelog.SnapshotRecord,
//     CheckpointRecord, ArchivedRecord, DecodeRecord and Latest
//     (internal/changelog); its produce, flusher.produceChangelog (with
//     the check that Redis still holds the partition, checkHeld) and
//     produceChangelogCheckpoints (changelog.go), steps of writeSteps; its
//     topic, ensureChangelog; the restore, the restorer's planRestore,
//     readChangelog, writeRestore, restoreAfterReset, restoreOnStart
//     (restore.go, restoreplan.go), called by recovery's rebuild
//     (restoreRebuilt) and startCheckpoints (recovery.go).
//
// # Storage
//
// New takes a Store (store.go), the interface of what the projector keeps:
// its write path to the read model, a subset of pkg/snapshot's public
// contract, and its own keys beside it (the children index, the outbox,
// armed deadlines, the closed sessions, a lost partition's rebuild, the
// replication wait on Redis Cluster). internal/projector/projstore is the
// Redis one, over the layout of internal/redislayout; Serve opens it.
//
// # Retention and the archive
//
// With Config.RetainClosed (CORREX_RETAIN_CLOSED) set, sessions that
// ended leave Redis that long after they ended, into the archive at
// Config.ArchiveURL (internal/archive; docs/retention.md). The deadlines
// step of every batch records each terminal snapshot in its partition's
// closed sessions (projstore's closed.go, a sorted set by end time, in the
// same script call as the deadlines). The sweeper (sweeper.go) runs one
// goroutine per owned partition, started and stopped with ownership like
// the firer's; every Config.ArchiveSweep it reads the sessions due, their
// snapshots and their whole histories (internal/sessionlog: one read of
// the partition per group of sessions whose histories fit in 8 MiB
// together, a read of its own for a larger one, streamed into its object
// as it is read, so a session of any length is archived in bounded
// memory), writes one object per session, produces each
// one's "archived" record to the snapshot changelog
// (<topic>.snapshots, changelog.ArchivedRecord; not with the changelog
// off, when no restore reads it) and waits for its acknowledgement,
// and only then removes the session from Redis, fenced by the archived
// position (projstore.Store.Forget): an event folded since keeps it for
// the next sweep. The fold goroutine drops the removed sessions from its
// cache between polls (folder.dropArchived), so a later event for one
// finds no session (a dead letter unknown_session) and a successor naming
// one is refused unknown_predecessor. A sweep that fails keeps its
// sessions in Redis, counts in correx.projector.archive.failures and makes
// /readyz fail until a sweep succeeds.
//
// # The read model proves itself
//
// The background verifier (verifier.go, docs/verification.md) compares every stored snapshot of the owned partitions with the
// fold of its session's events from the log, Config.VerifyRate sessions a
// second, each once per cycle, and repairs a missing, stale or corrupt one
// through the fenced write POST /v1/sessions/{id}/rebuild uses. It starts
// and stops with ownership like the firer and the sweeper, reports only
// what it read twice around a fold past the checkpoint (a snapshot that
// moved is compared again), stops a partition's cycle when the checkpoint
// goes back (the projector rebuilds it), and waits while any owned
// partition is catching up. What it finds is counted (correx.verify.*)
// and published in Redis for GET /v1/verify (projstore's verify.go).
//
// # Shape
//
// Projector builds one collaborator per concern and runs them; each is
// built with what it uses, and none holds the projector:
//
//   - state (state.go) owns what the fold goroutine and the group's
//     callbacks share under its lock, state.mu: the owned partitions
//     (parts, each a partState), the cache of their sessions, the stalls,
//     the topic's partition count (partitioning, partitioning.go), the
//     change feed and derived events (derived), and the partitions rebuilt
//     since the current poll was fetched; it adds and drops partitions.
//   - folder (fold.go) is the fold goroutine: the poll loop, the reducer,
//     the decode buffer and whether a partition advanced since the last
//     batch; it folds records, hands batches to the flusher and writes the
//     last one on a graceful stop.
//   - group (group.go) owns franz-go's callbacks (onAssigned, onRevoked,
//     onLost, adjustOffsets), which start and stop each owned partition's
//     firing, sweep and verification and add, flush and drop its state;
//     ensuring the topics and leaving the group are functions of the
//     configuration and the admin client beside it.
//   - recovery (recovery.go) owns the partitions' starts at their
//     checkpoints, the idle check, the rebuild of a partition whose read
//     model Redis lost or rolled back, and applying each written batch
//     (collect, finish, dropStale).
//   - restorer (restore.go; its plan, restoreplan.go) owns the restores
//     from the snapshot changelog.
//   - deadLetters (deadletter.go) sets records aside; systemAuth
//     (sysauth.go) loads and holds the system key.
//   - flusher (flush.go), firer (firer.go), sweeper (sweeper.go) and
//     verifier (verifier.go) write batches, fire deadlines, archive closed
//     sessions and verify the read model.
//
// The fold, the group's callbacks and the start of assigned partitions
// take state.mu; the restorer and the verifier take it only through the
// state's methods.
//
// One goroutine polls, decodes and folds (BlockRebalanceOnPoll keeps
// rebalances between polls). Snapshots are encoded in that goroutine and
// handed to the flush goroutine (flusher), so Redis round trips overlap
// folding; at most one batch is in flight. The cache and the partitions'
// state have no lock of their own: they belong to the fold goroutine, and
// the rebalance callbacks use them under state.mu between polls. The
// firer runs one goroutine per owned partition, started and stopped by the
// rebalance callbacks; it shares nothing with the fold but the store and the
// Kafka client (and the hints the flush goroutine sends it).
// Readiness (Ready) reads an atomic copy of the stalled partitions and
// pings Redis; it never takes state.mu, which is held across Redis
// calls. A bounded LRU cache holds hot snapshots; only
// snapshots whose latest state is known to be stored are evicted, and misses
// are read from Redis in one pipelined round trip per poll.
//
// Flushes are group commits while the projector is caught up: a batch
// starts as soon as a poll leaves nothing more to fold (it returned fewer
// than MaxPollRecords records, and the partitions are less than that
// behind their high watermarks) and no batch is in flight. What is folded
// while one is in flight goes in the next batch, which starts as soon as
// the one in flight is written: the poll waiting for records returns early
// then, instead of at its timeout (FlushInterval, which is only the
// longest idle wait). An event thus becomes visible about one fold and one
// or two Redis writes after it is polled, whatever the load. While the
// projector is catching up (polls come back full, or it is MaxPollRecords
// or more behind) it writes large batches:
// when FlushSize snapshots are dirty, or MaxFlushInterval after the
// previous batch, which writes each busy session far less often.
//
// Each replica should have a stable group instance id (static membership,
// KIP-345): a replica killed and restarted under the same id takes its
// partitions back at once instead of after the session timeout.
//
// Records that cannot be folded (undecodable, unknown version or type,
// invalid, keyed by another session, off their key's partition, or for a
// session that was never created, except a SessionReplaced, see above) go
// to the dead-letter topic with the
// reason in a header; they never stop the partition. A replay can send a
// record there twice.
//
// # Adding partitions
//
// Kafka's default partitioner moves keys when partitions are added: a
// session's later events go to another partition than its earlier ones.
// Once the projector sees the new count, records written under the old
// count are wrong_partition if they are folded again (a rebuild), and a
// moved session's new events are fenced by its old position when the new
// partition's number is lower. The topic's partition count is therefore
// fixed for the life of a read model: create the topic with the partitions
// it will need, and to grow, produce the log again into a new topic and
// rebuild from it.
//
// # Memory
//
// The cache is bounded by Config.CacheSize entries and Config.CacheBytes
// estimated bytes (entry.estimate: a fixed 768 bytes plus the length of the
// snapshot's binary encoding when it was last encoded, on loading and at
// each flush), whichever is reached first; the encodings of the batch in
// flight count against CacheBytes too, until it is written. Entries not
// yet stored (dirty, or written by a batch still in flight) are never
// evicted, and count at their length before the folds since, so the cache
// may exceed the bounds by a batch of them until they are written: a
// batch is at most FlushSize snapshots and Config.FlushBytes of their
// estimated encodings (entry.pending: the last encoded length plus the
// records folded since; a fold adds at most its record's payload), a
// quarter of CacheBytes by default. The fold starts a batch as soon as
// the dirty bytes reach FlushBytes, in the middle of a poll if need be
// (the batch's checkpoints stop at the record folded last), and waits for
// the batch in flight first. Before the byte bound, FlushSize alone let
// 20,000 dirty 8 KB snapshots make one batch: the snapshots, their
// encodings, their changelog records and Redis commands, and the fetches
// they came in, about 16 KB live per snapshot (a heap profile of
// TestManyLargeDirtySnapshotsAreWrittenInBoundedBatches: the batch's
// binary encodings, the decoded goals, labels and metadata, the poll's
// decompressed fetches, the change feed's and changelog's records), which
// the collector's headroom (GOGC) and fragmentation made about 70 KB of
// RSS.
//
// # Tracing
//
// Lifecycle spans (a session.transition per applied transition, a
// session.event per rejected event) are made off the fold path and past the
// SDK's per-span machinery (Telemetry, correxotel.LifecycleSpans). Folded
// copies a few fields into the current chunk of 1,024 spans, and the
// record's traceparent and tracestate (up to 512 bytes, what records carry)
// into the chunk's arena: the chunk keeps no record, since a record keeps
// its whole fetched batch alive. A full chunk, and at each flush the rest,
// goes through a queue of 64 chunks to one goroutine that extracts each
// trace context, samples, builds the chunk's spans as read-only records and
// exports them, 512 per exporter call. The projector.flush span links the
// first 128 transitions folded since the previous flush, whose span
// contexts the fold derives for that. The histograms a transition feeds
// (session duration, approval wait, ...) travel with its chunk and are
// recorded by the same goroutine before the spans are built: a Record
// costs more than the rest of Folded, and a dropped chunk still records
// them.
//
// No span is lost without a count. A full queue makes the fold wait up to
// 250 ms for room (correx.projector.spans.waits), so an exporter slower than
// the fold paces it and loses nothing. A wait that runs out means the
// exporter is stuck (a collector down, each export lasting its timeout): the
// chunk is dropped and counted in correx.projector.spans.dropped, as is every
// chunk that finds the queue full until an export ends, so a stuck exporter
// costs the fold one wait per export, not one per chunk. A failed export
// counts its spans there too (and goes to otel.Handle, as the SDK's own
// do), and Close gives the queue 5 s before counting the rest. Through the
// SDK's batch span processor, as before, spans were dropped uncounted
// whenever its 2,048-span queue filled: BenchmarkTracingOverhead, which now
// fails a run that loses spans, saw 2% to 46% of a run's lifecycle spans
// lost that way, 18% to 38% with OTLP encoding.
package projector
