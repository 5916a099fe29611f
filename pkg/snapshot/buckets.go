package snapshot

import "github.com/correx/sessions/internal/redislayout"

// Buckets is the number of hash-tagged groups the store spreads sessions
// over. A session's snapshot key and its bucket's state index share the hash
// tag "{bNNN}", so the fencing script that writes both runs on one Redis
// Cluster slot; 256 tags spread over the 16384 slots give every node of a
// cluster a share. The number is part of the storage layout
// (internal/redislayout): changing it means rebuilding the read model from
// the log.
const Buckets = redislayout.Buckets

// Bucket returns the bucket of a session id (FNV-1a, modulo Buckets).
func Bucket(sessionID string) int { return redislayout.Bucket(sessionID) }
