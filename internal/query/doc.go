// Package query serves the read model over HTTP: a session's snapshot (with
// ETag and read-your-writes waits), listings by state, statistics, a
// replay that rebuilds a session from the Kafka log to check the stored
// snapshot, a session as of a version or a time, a session's whole history
// read from the log in pages, and watches: Server-Sent Events streams of
// the change feed (Watcher's comment argues how they stay gap-free and
// bounded). Only the replay, the rebuild, the history and the watches touch
// Kafka; a session whose first events left the log answers them 409
// history-truncated. Closed sessions that left Redis are read back from the
// archive, and listed. Metrics: correx.query.replays by outcome (match,
// mismatch) and correx.query.rebuilds by outcome (match, replaced, kept).
// For the console it also says who a token is (GET /v1/whoami) and forwards
// a session's actions to ingest with the caller's token; it writes no event
// itself.
//
// The files, by what they own:
//
//   - query.go: Handler, its Options and the route table (NewHandler);
//     route.go: what the routes share: sessionRoute, the checks every
//     route of one session makes first (method, id), the 400, 404, 429
//     and 503 answers with their Retry-After values, the limit parameter;
//   - session.go: GET /v1/sessions/{id} and its read-your-writes wait;
//     asof.go: the same read as of a version or a time;
//   - list.go: GET /v1/sessions; filter.go: the filter that listings and
//     watches share; stats.go: GET /v1/stats; verify.go: GET /v1/verify;
//   - replay.go: the replay (GET /v1/sessions/{id}/replay) and the log
//     reader it and the rebuild share; rebuild.go: POST
//     /v1/sessions/{id}/rebuild; history.go: the history, its cursors and
//     fold cache; truncated.go: the 409 of a session whose first events
//     left the log;
//   - archived.go: the archived reads and GET /v1/archive; headcache.go:
//     the archived heads kept;
//   - watch.go: WatchOptions and the watch routes (GET /v1/watch, GET
//     /v1/sessions/{id}/watch), a resumed one included; watcher.go: the
//     Watcher, the one reader of the change feed and its fan-out to the
//     subscribers; catchup.go: a resumed watch's turn and its read of the
//     feed up to the live position; stream.go: one watch's SSE stream;
//     cursor.go: the sealed cursors;
//   - actions.go: GET /v1/whoami and the console's actions;
//   - slots.go, partitions.go, metrics.go, store.go: the bounds of
//     concurrent requests, the topic's partitions, the metrics, the store;
//     service.go: Config and Serve, the service.
package query
