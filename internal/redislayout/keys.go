package redislayout

import (
	"fmt"
	"strconv"
	"strings"
)

// Buckets is the number of hash-tagged groups the store spreads sessions
// over. A session's snapshot key and its bucket's state index share the hash
// tag "{bNNN}", so the fencing script that writes both runs on one Redis
// Cluster slot; 256 tags spread over the 16384 slots give every node of a
// cluster a share. The number is part of the storage layout: changing it
// means rebuilding the read model from the log.
const Buckets = 256

// Bucket returns the bucket of a session id (FNV-1a, modulo Buckets).
func Bucket(sessionID string) int {
	h := uint32(2166136261)
	for i := 0; i < len(sessionID); i++ {
		h ^= uint32(sessionID[i])
		h *= 16777619
	}
	return int(h % Buckets)
}

// Keys builds the store's key names under a prefix:
//
//	<prefix>:{bNNN}:s:<sessionId>         a snapshot (binary, see pkg/snapshot's binary.go)
//	<prefix>:{bNNN}:idx                   the bucket's state index (sorted set)
//	<prefix>:{bNNN}:kids:<parentId>       a parent's children (set, see projstore's children.go)
//	<prefix>:{bNNN}:ep                    the bucket's ownership epochs (hash: partition -> epoch, see projstore's epoch.go)
//	<prefix>:{bNNN}:t:<x>                 archived sessions' tombstones (hashes: sessionId -> tombstone, x one hex digit, see projstore's tombstones.go)
//	<prefix>:ckpt:<topic>                 the topic's checkpoints (hash)
//	<prefix>:outbox:<topic>               records to produce again after a crash (hash, see projstore's outbox.go)
//	<prefix>:{dl:<topic>:<partition>}:due   a partition's deadlines (sorted set, see projstore's deadlines.go)
//	<prefix>:{dl:<topic>:<partition>}:armed and their entries (hash)
//	<prefix>:{dl:<topic>:<partition>}:closed  a partition's ended sessions, by end time (sorted set, see projstore's closed.go)
//	<prefix>:{dl:<topic>:<partition>}:epoch   the partition's ownership epoch (string, see projstore's epoch.go)
//	<prefix>:{rN}:replicated              a Redis Cluster master's WaitReplicated key (see projstore's replication.go)
//	<prefix>:verify:<topic>               the background verifier's counters and last cycle (hash, see projstore's verify.go)
//	<prefix>:verify:<topic>:recent        its last mismatches, newest first (list of JSON objects)
//
// The snapshots, the state indexes and the checkpoints are pkg/snapshot's
// Store's (its PutScript reads the epochs and the tombstones, which fence
// it); the children, the epochs, the tombstones, the outbox, the
// deadlines, the closed sessions, the replication markers and the
// verifier's report are the projector's (internal/projector/projstore). The checkpoints' hash also
// holds each partition's epoch, field "<partition>:ep". Nothing else under the prefix
// is the store's: other programs keep keys there too (pkg/feed's consumers
// their checkpoints, "<prefix>:feed:..."), and Owns, which Reset deletes
// by, must keep recognising exactly these.
//
// The bucket tags are computed once, since every key of every write needs one.
type Keys struct {
	prefix string
	tags   [Buckets]string
}

// NewKeys returns the key names under prefix, which ValidPrefix accepts.
func NewKeys(prefix string) *Keys {
	k := &Keys{prefix: prefix}
	for b := range k.tags {
		k.tags[b] = fmt.Sprintf("%s:{b%03d}", prefix, b)
	}
	return k
}

// ValidPrefix says why prefix cannot prefix the store's keys, or returns nil.
func ValidPrefix(prefix string) error {
	if prefix == "" || strings.ContainsAny(prefix, "{} \t\r\n") {
		return fmt.Errorf("snapshot: prefix %q must be non-empty, without braces or spaces", prefix)
	}
	return nil
}

// Prefix returns the prefix the keys are under.
func (k *Keys) Prefix() string { return k.prefix }

// Snapshot returns the key of a session's snapshot.
func (k *Keys) Snapshot(sessionID string) string {
	return k.tags[Bucket(sessionID)] + ":s:" + sessionID
}

// Owns reports whether key is one of the store's keys (listed on Keys).
func (k *Keys) Owns(key string) bool {
	rest, ok := strings.CutPrefix(key, k.prefix+":")
	if !ok {
		return false
	}
	for _, p := range [...]string{"ckpt:", "outbox:", "{dl:", "verify:"} {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	if tag, rest, ok := strings.Cut(rest, "}:"); ok && len(tag) > 2 && tag[0] == '{' && digits(tag[2:]) {
		switch tag[1] {
		case 'b': // a bucket
			return len(tag) == 5 && (strings.HasPrefix(rest, "s:") || rest == "idx" || strings.HasPrefix(rest, "kids:") ||
				rest == "ep" || (len(rest) == 3 && strings.HasPrefix(rest, "t:")))
		case 'r': // a replication marker
			return rest == "replicated"
		}
	}
	return false
}

func digits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// Pattern returns a SCAN MATCH pattern for the keys under the prefix: the
// prefix with glob characters escaped, then ":*".
func (k *Keys) Pattern() string {
	var b strings.Builder
	for _, r := range k.prefix {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String() + ":*"
}

// Index returns the key of a bucket's state index.
func (k *Keys) Index(bucket int) string { return k.tags[bucket] + ":idx" }

// SnapshotBase returns what a bucket's snapshot keys start with, the
// session id following ("<prefix>:{bNNN}:s:").
func (k *Keys) SnapshotBase(bucket int) string { return k.tags[bucket] + ":s:" }

// Checkpoints returns the key of a topic's checkpoints.
func (k *Keys) Checkpoints(topic string) string { return k.prefix + ":ckpt:" + topic }

// Progress returns the pub/sub channel on which checkpoint writes of a
// topic are announced (the partitions written, comma-separated). A
// channel, not a key: it holds nothing and belongs to no Cluster slot.
func (k *Keys) Progress(topic string) string { return k.prefix + ":progress:" + topic }

// Outbox returns the key of a topic's outbox.
func (k *Keys) Outbox(topic string) string { return fmt.Sprintf("%s:outbox:%s", k.prefix, topic) }

// Children returns the key of a parent's children index, in the parent's
// bucket.
func (k *Keys) Children(parent string) string { return k.tags[Bucket(parent)] + ":kids:" + parent }

// Deadlines returns the keys of a partition's armed deadlines: the due set
// and the hash of entries, under one hash tag.
func (k *Keys) Deadlines(topic string, partition int32) (due, armed string) {
	tag := k.prefix + ":{dl:" + topic + ":" + strconv.FormatInt(int64(partition), 10) + "}"
	return tag + ":due", tag + ":armed"
}

// Closed returns the key of a partition's ended sessions (member
// sessionId, score its end in Unix ms), under the deadlines' hash tag, so
// that the deadlines step writes both in one call and a rebuild deletes
// both with DeleteDeadlines.
func (k *Keys) Closed(topic string, partition int32) string {
	return k.prefix + ":{dl:" + topic + ":" + strconv.FormatInt(int64(partition), 10) + "}:closed"
}

// Epochs returns the key of a bucket's ownership epochs (hash: partition
// -> epoch), read by every script that writes the bucket's keys.
func (k *Keys) Epochs(bucket int) string { return k.tags[bucket] + ":ep" }

// Epoch returns the key of a partition's ownership epoch, under the
// deadlines' hash tag, read by every script that writes the partition's
// deadlines and closed sessions.
func (k *Keys) Epoch(topic string, partition int32) string {
	return k.prefix + ":{dl:" + topic + ":" + strconv.FormatInt(int64(partition), 10) + "}:epoch"
}

// TombstoneShards is the number of tombstone hashes per bucket: small
// hashes stay in Redis's compact listpack encoding (at most 128 entries by
// default), which is what keeps a tombstone within about 30 bytes up to
// 128*TombstoneShards*Buckets (half a million) tombstones.
const TombstoneShards = 16

// Tombstones returns the key of the tombstone hash that holds a session's
// tombstone, in the session's bucket.
func (k *Keys) Tombstones(sessionID string) string {
	return k.tags[Bucket(sessionID)] + ":t:" + string("0123456789abcdef"[tombstoneShard(sessionID)])
}

// TombstoneKeys returns the keys of a bucket's tombstone hashes.
func (k *Keys) TombstoneKeys(bucket int) []string {
	out := make([]string, TombstoneShards)
	for i := range out {
		out[i] = k.tags[bucket] + ":t:" + string("0123456789abcdef"[i])
	}
	return out
}

func tombstoneShard(sessionID string) int {
	h := uint32(2166136261)
	for i := 0; i < len(sessionID); i++ {
		h ^= uint32(sessionID[i])
		h *= 16777619
	}
	return int(h/Buckets) % TombstoneShards
}

// Replicated returns the replication marker key under a hash tag ("rN").
func (k *Keys) Replicated(tag string) string { return k.prefix + ":{" + tag + "}:replicated" }

// Verify returns the key of the background verifier's report on a topic:
// a hash of counters and the last cycle (projstore's verify.go).
func (k *Keys) Verify(topic string) string { return k.prefix + ":verify:" + topic }

// VerifyRecent returns the key of the list of the verifier's last
// mismatches on a topic, newest first.
func (k *Keys) VerifyRecent(topic string) string { return k.prefix + ":verify:" + topic + ":recent" }
