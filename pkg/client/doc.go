// Package client is the Go client of correx-sessions: it sends session
// events to the ingest service and reads snapshots, listings and the change
// feed from the query service.
//
// # Quick start
//
//	c, err := client.New(client.IngestURL("http://127.0.0.1:8081"), client.QueryURL("http://127.0.0.1:8082"))
//	if err != nil { ... }
//	out, err := c.SendAndWait(ctx,
//		client.SessionCreated("acme:run-1", client.Goal("fix the build")),
//		client.SessionStarted("acme:run-1"),
//		client.ToolCompleted("acme:run-1", false))
//	// out[i].Status is applied or rejected (with out[i].Reason), and
//	// out[i].Snapshot is the session read after the events were folded.
//
// # Options
//
// Every option is an Opt, made by a function named for what it sets, in
// the manner of franz-go's kgo.Opt. Its kind is the call it configures:
// ClientOpt for New (IngestURL, Token, Retry, ...), BatcherOpt for
// NewBatcher (Lanes, Linger, ...), CreateOpt for SessionCreated (Goal,
// Labels, Parent, ...), EventOpt for every event (ExpectedVersion,
// EventID, ...), GetOpt for Get (MinPosition, AsOfVersion, Wait), and
// ListOpt, ArchiveOpt and WatchOpt for List, Archive and Watch. An option
// more than one call takes is of each one's kind: StateIs, HasLabels and
// ParentIs are FilterOpts (List and Watch), Limit is a PageOpt (List and
// Archive), IDPrefix and Cursor are ScanOpts (all three). An option given
// to a call that does not take it does not compile:
//
//	for page, err := range c.List(ctx, client.StateIs("ACTIVE"), client.IDPrefix("acme:"), client.Limit(100)) { ... }
//	for ch, err := range c.Watch(ctx, client.StateIs("FAILED"), client.Cursor(cursor)) { ... }
//
// # Events
//
// A constructor per event type (SessionCreated, SessionStarted, ...,
// Custom) builds an Event with its id, a UUIDv7, and occurredAt assigned on
// the spot. Every retry, by the client or by you, resends the same Event with
// the same id, and the fold counts a resent id as a duplicate: an effect
// happens once. That holds while the session's duplicate window remembers the
// id: resend before the session's next 128 events (README, "The lifecycle").
// ExpectedVersion(v) makes an event conditional on the session's version.
//
// Session ids are 1-128 characters of [A-Za-z0-9._:-], not only dots
// (pkg/fsm's ValidNewSessionID): no "/", no space, not "." or "..". An
// event built with another id, or a Custom event whose type is not
// x.<vendor>.<Name>, is refused before any I/O (its Err matches
// ErrInvalidEvent), and Get refuses such an id with ErrInvalidSessionID.
//
// # Sending
//
// Send writes events in requests of at most 1000 events and 1 MiB, in
// order, and retries 429, 502, 503, 504 and transport errors with
// exponential backoff and jitter, never sooner than Retry-After. After a 503
// it resends exactly the events the answer did not confirm; after a dropped
// connection, the whole request. A 400 is a *ValidationError naming every
// refused event by its index and field. SendAndWait adds read-your-writes:
// it waits until the projector has folded the events and reports each
// event's outcome (see its doc for what a snapshot can and cannot tell).
//
// A Batcher sends events added one at a time from many goroutines in
// batches, in the background, with bounded memory; it keeps each session's
// events in order (one lane per session hash, one request in flight per
// lane).
//
// # Reading
//
// Get reads a snapshot (ErrNotFound for an unknown session; MinPosition to
// read your writes), AwaitState waits until a session reaches a state (one
// the projector derives included, such as a child's cancellation), List
// pages through a listing as an iterator, History reads a page of a
// session's whole history (every event with its version, position and
// outcome; HistoryPages iterates over the pages), and Watch streams the change feed,
// resuming with its last cursor after a dropped connection; its OnConnect
// says when a stream is established, so that what is sent after it is
// delivered.
//
// The shapes read are pkg/wire's, which imports only the standard library:
// Snapshot and its members (Counters, Approval, Failure, ...) are aliases
// of wire.Snapshot and its members, the type the query service encodes,
// and History's entries are wire.HistoryEntry.
//
// # Errors
//
// A service's refusal is a *StatusError (ErrNotFound for 404). What retries
// did not cure is a *SendError for Send and a *ReadError for the reads, each
// with the number of attempts and the last failure. Retries stop early on a
// failure they cannot cure: a wrong host name or certificate, or a request
// net/http refuses to send (a header value it cannot carry), at once, a
// refused connection after 3 attempts (see Retry). A watch that has had a
// stream keeps the whole budget for refusals, so that it outlives a restart
// of the query service and resumes from its last cursor (see Watch). New
// refuses a token with a control character, such as the newline of a file
// it was read from.
//
// # Concurrency, telemetry, security
//
// A Client is safe for concurrent use; make one and share it. Its transport
// is wrapped with otelhttp: each request is a client span and carries the
// caller's trace context (traceparent), so the pipeline's spans join the
// caller's trace. Token sends a bearer token; TLSConfig sets a CA and a
// client certificate (mutual TLS); HTTPClient takes a client of your own.
// Every option's default is in its doc comment.
//
// The client bounds what it reads from a service: an ingest answer at 4 MiB,
// a query answer (a snapshot, a listing or history page) at 32 MiB, a line of the watch
// stream at 1 MiB.
package client
