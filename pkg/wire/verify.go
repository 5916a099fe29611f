package wire

import "time"

// Verify is the body of the query service's GET /v1/verify: what the
// projectors' background verifiers found when they compared the stored
// snapshots with the fold of the events log (docs/verification.md).
// The counts are totals since the report was first written, summed over
// every projector that verified the topic's partitions.
type Verify struct {
	Topic string `json:"topic"`
	// Checked counts the sessions compared.
	Checked int64 `json:"checked"`
	// Mismatches counts the differences found, by kind: missing, stale,
	// corrupt, extra (every kind present, zero included).
	Mismatches map[string]int64 `json:"mismatches"`
	// Repaired counts the mismatches written over with the fold of the
	// log, through the fenced path POST /v1/sessions/{id}/rebuild uses.
	Repaired int64 `json:"repaired"`
	// Unverifiable counts the sessions whose history neither the log nor
	// the snapshot changelog reaches.
	Unverifiable int64 `json:"unverifiable"`
	// LastCycle is the last full cycle a projector completed over the
	// partitions it owned; null before the first.
	LastCycle *VerifyCycle `json:"lastCycle"`
	// Recent lists the last 20 mismatches, newest first.
	Recent []VerifyMismatch `json:"recent"`
}

// VerifyCycle is one pass of a projector's verifier over the partitions
// it owned.
type VerifyCycle struct {
	// EndedAt is when it ended.
	EndedAt time.Time `json:"endedAt"`
	// DurationMs is how long it took, in milliseconds.
	DurationMs int64 `json:"durationMs"`
	// Sessions is how many sessions it compared.
	Sessions int64 `json:"sessions"`
	// Partitions lists the partitions it covered.
	Partitions []int32 `json:"partitions"`
}

// VerifyMismatch is one difference between a stored snapshot and the fold
// of its session's events.
type VerifyMismatch struct {
	SessionID string `json:"sessionId"`
	// Kind is missing (events, no snapshot), stale (an older version than
	// the log's), corrupt (other bytes than the fold's at the same
	// position) or extra (a snapshot with no events).
	Kind string `json:"kind"`
	// StoredVersion and FoldedVersion are the versions of the stored
	// snapshot and of the fold; null where there is none (or the stored
	// bytes do not decode).
	StoredVersion *uint64 `json:"storedVersion"`
	FoldedVersion *uint64 `json:"foldedVersion"`
	// StoredDigest and FoldedDigest are their digests (hex), "" where
	// there is none.
	StoredDigest string `json:"storedDigest"`
	FoldedDigest string `json:"foldedDigest"`
	// Repaired tells whether the fold was stored in its place.
	Repaired bool      `json:"repaired"`
	At       time.Time `json:"at"`
}

// VerifyKinds are the kinds of mismatch, in the order they are listed.
var VerifyKinds = []string{"missing", "stale", "corrupt", "extra"}
