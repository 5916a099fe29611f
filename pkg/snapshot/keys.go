package snapshot

import (
	"fmt"
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

// keys builds the store's key names under a prefix:
//
//	<prefix>:{bNNN}:s:<sessionId>         a snapshot (binary, see binary.go)
//	<prefix>:{bNNN}:idx                   the bucket's state index (sorted set)
//	<prefix>:{bNNN}:kids:<parentId>       a parent's children (set, see children.go)
//	<prefix>:ckpt:<topic>                 the topic's checkpoints (hash)
//	<prefix>:outbox:<topic>               records to produce again after a crash (hash, see outbox.go)
//	<prefix>:{dl:<topic>:<partition>}:due   a partition's deadlines (sorted set, see deadlines.go)
//	<prefix>:{dl:<topic>:<partition>}:armed and their entries (hash)
//	<prefix>:{rN}:replicated              a Redis Cluster master's WaitReplicated key (see replication.go)
//
// Nothing else under the prefix is the store's: other programs keep keys
// there too (pkg/feed's consumers their checkpoints, "<prefix>:feed:..."),
// and owns, which Reset deletes by, must keep recognising exactly these.
//
// The bucket tags are computed once, since every key of every write needs one.
type keys struct {
	prefix string
	tags   [Buckets]string
}

func newKeys(prefix string) *keys {
	k := &keys{prefix: prefix}
	for b := range k.tags {
		k.tags[b] = fmt.Sprintf("%s:{b%03d}", prefix, b)
	}
	return k
}

func validPrefix(prefix string) error {
	if prefix == "" || strings.ContainsAny(prefix, "{} \t\r\n") {
		return fmt.Errorf("snapshot: prefix %q must be non-empty, without braces or spaces", prefix)
	}
	return nil
}

func (k *keys) snapshot(sessionID string) string {
	return k.tags[Bucket(sessionID)] + ":s:" + sessionID
}

// owns reports whether key is one of the store's keys (listed on keys).
func (k *keys) owns(key string) bool {
	rest, ok := strings.CutPrefix(key, k.prefix+":")
	if !ok {
		return false
	}
	for _, p := range [...]string{"ckpt:", "outbox:", "{dl:"} {
		if strings.HasPrefix(rest, p) {
			return true
		}
	}
	if tag, rest, ok := strings.Cut(rest, "}:"); ok && len(tag) > 2 && tag[0] == '{' && digits(tag[2:]) {
		switch tag[1] {
		case 'b': // a bucket
			return len(tag) == 5 && (strings.HasPrefix(rest, "s:") || rest == "idx" || strings.HasPrefix(rest, "kids:"))
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

// pattern returns a SCAN MATCH pattern for the keys under the prefix: the
// prefix with glob characters escaped, then ":*".
func (k *keys) pattern() string {
	var b strings.Builder
	for _, r := range k.prefix {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String() + ":*"
}

func (k *keys) index(bucket int) string { return k.tags[bucket] + ":idx" }

func (k *keys) checkpoints(topic string) string { return k.prefix + ":ckpt:" + topic }
