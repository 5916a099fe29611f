package projstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/correx/sessions/internal/redislayout"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/redis/go-redis/v9"
)

// Replication on Redis Cluster.
//
// WAIT waits for the replication offset of the connection's own last
// write, on the server it runs on. A batch on Redis Cluster is spread over
// the masters, one connection each, and a flush writes more than one batch
// (the outbox, the snapshots, the deadlines, the children), so no single
// WAIT covers it. What covers it is one WAIT per master, after all of the
// flush's writes, behind a write of its own on the same connection: a
// master's replication stream is ordered, so replicas that acknowledged
// that write hold every write the master took before it, from any
// connection (WaitReplicated).
//
// That holds only for writes the same master took, with the same
// history: a master that died after a write and before the WAIT takes
// the write with it, and its promoted replica, asked next, may lack it.
// So every master's place in its replication stream (its replication ID
// and offset) is noted before the writes (MarkReplication, or the mark the
// previous WaitReplicated returned) and compared after: a master that is
// gone, new, on another history (a promoted replica, a restart without
// its data) or behind where it was fails with ErrMastersChanged, and the
// writer must write again what it wrote since the mark before it may rely
// on it.

// ErrMastersChanged is wrapped by WaitReplicated's error when a master of
// the Redis Cluster is not the one of the mark it was given (gone, new, a
// promoted replica, restarted on another history, or behind): writes made
// since the mark may be lost, so they must be made again, after a new
// mark, before a checkpoint may pass them.
var ErrMastersChanged = errors.New("the Redis Cluster masters changed since the writes")

// ReplicationMark is where every master of a Redis Cluster stood in its
// replication stream at one moment. The zero value (nil) is no mark.
type ReplicationMark struct {
	masters map[string]replPoint // by the address the client reaches it at
}

type replPoint struct {
	id     string // master_replid: a new one for each new history
	offset int64  // master_repl_offset
}

// MarkReplication returns where every master stands now, to be given to
// WaitReplicated after the writes it must cover. It is nil, with no round
// trip, unless the store is on Redis Cluster and waits for replicas
// (WaitReplicas).
func (s *Store) MarkReplication(ctx context.Context) (*ReplicationMark, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || s.waitReplicas == 0 {
		return nil, nil
	}
	m := &ReplicationMark{masters: map[string]replPoint{}}
	var mu sync.Mutex
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		info, err := node.Info(ctx, "replication").Result()
		if err != nil {
			return err
		}
		p, err := parseReplication(info)
		if err != nil {
			return fmt.Errorf("%s: %w", node.Options().Addr, err)
		}
		mu.Lock()
		m.masters[node.Options().Addr] = p
		mu.Unlock()
		return nil
	})
	if err != nil {
		return nil, &snapshot.StoreError{Op: "replication", Err: err}
	}
	return m, nil
}

// WaitReplicated makes sure that every write the cluster's masters took
// before the call has reached WaitReplicas replicas of the master that
// took it, if that master took it after since: on every master, in one
// pipeline on one connection, a write to a key of its own slots, WAIT,
// and its replication state. It fails with snapshot.ErrNotReplicated when a master
// had fewer replicas acknowledge within the timeout (call it again: the
// writes stand), and with ErrMastersChanged when a master is not the one
// of since (write again, after a new mark). On success it returns the
// mark the next writes can be checked against.
//
// On a single server, or without WaitReplicas, it does nothing and returns
// nil: PutBatch waits there, in the batch's own round trip.
func (s *Store) WaitReplicated(ctx context.Context, since *ReplicationMark) (*ReplicationMark, error) {
	cc, ok := s.rdb.(*redis.ClusterClient)
	if !ok || s.waitReplicas == 0 {
		return nil, nil
	}
	if since == nil {
		return nil, &snapshot.StoreError{Op: "replication", Err: fmt.Errorf("%w: no mark before the writes", ErrMastersChanged)}
	}
	now := &ReplicationMark{masters: map[string]replPoint{}}
	var mu sync.Mutex
	var short []string
	err := cc.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		key, err := s.markers.key(ctx, s.keys, node)
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		pipe := node.Pipeline()
		set := pipe.Set(ctx, key, "1", 0)
		wait := pipe.Do(ctx, "WAIT", s.waitReplicas, s.waitTimeout.Milliseconds())
		info := pipe.Info(ctx, "replication")
		if _, err := pipe.Exec(ctx); err != nil {
			if set.Err() != nil {
				s.markers.forget(addr) // its slots moved: find a key again
			}
			return fmt.Errorf("%s: %w", addr, err)
		}
		p, err := parseReplication(info.Val())
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		n, err := wait.Int()
		if err != nil {
			return fmt.Errorf("%s: %w", addr, err)
		}
		mu.Lock()
		defer mu.Unlock()
		now.masters[addr] = p
		if n < s.waitReplicas {
			short = append(short, fmt.Sprintf("%s: %d of %d replicas within %v", addr, n, s.waitReplicas, s.waitTimeout))
		}
		return nil
	})
	if err != nil {
		return nil, &snapshot.StoreError{Op: "replication", Err: err}
	}
	if changed := since.changes(now); changed != "" {
		return nil, &snapshot.StoreError{Op: "replication", Err: fmt.Errorf("%w: %s", ErrMastersChanged, changed)}
	}
	if len(short) > 0 {
		return nil, &snapshot.StoreError{Op: "replication", Err: fmt.Errorf("%w: %s", snapshot.ErrNotReplicated, strings.Join(short, "; "))}
	}
	return now, nil
}

// changes describes how now differs from m (a master gone, new, on
// another history or behind), or returns "".
func (m *ReplicationMark) changes(now *ReplicationMark) string {
	for addr, was := range m.masters {
		is, ok := now.masters[addr]
		switch {
		case !ok:
			return addr + " is no longer a master"
		case is.id != was.id:
			return addr + " is on another replication history"
		case is.offset < was.offset:
			return fmt.Sprintf("%s went back from offset %d to %d", addr, was.offset, is.offset)
		}
	}
	for addr := range now.masters {
		if _, ok := m.masters[addr]; !ok {
			return addr + " became a master"
		}
	}
	return ""
}

// parseReplication reads a master's replication ID and offset from INFO
// replication; a node that is not a master is an error.
func parseReplication(info string) (replPoint, error) {
	var p replPoint
	role := ""
	for line := range strings.SplitSeq(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch k {
		case "role":
			role = v
		case "master_replid":
			p.id = v
		case "master_repl_offset":
			p.offset, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if role != "master" || p.id == "" {
		return p, fmt.Errorf("not a master (role %q, replication id %q)", role, p.id)
	}
	return p, nil
}

// markerKeys finds, per master, a key of one of its slots for
// WaitReplicated's write: "<prefix>:{rN}:replicated", N chosen so that the
// key hashes to the first slot the master serves. Safe for concurrent use.
type markerKeys struct {
	mu     sync.Mutex
	byAddr map[string]string
}

func (m *markerKeys) key(ctx context.Context, keys *redislayout.Keys, node *redis.Client) (string, error) {
	addr := node.Options().Addr
	m.mu.Lock()
	k, ok := m.byAddr[addr]
	m.mu.Unlock()
	if ok {
		return k, nil
	}
	slot, err := firstSlot(ctx, node)
	if err != nil {
		return "", err
	}
	k = keys.Replicated(tagForSlot(slot))
	m.mu.Lock()
	if m.byAddr == nil {
		m.byAddr = map[string]string{}
	}
	m.byAddr[addr] = k
	m.mu.Unlock()
	return k, nil
}

func (m *markerKeys) forget(addr string) {
	m.mu.Lock()
	delete(m.byAddr, addr)
	m.mu.Unlock()
}

// firstSlot returns the first slot node serves, from its own CLUSTER NODES
// line ("myself"): the fields after the eighth are its slots, "N" or
// "N-M" (and "[...]" for slots being migrated, skipped).
func firstSlot(ctx context.Context, node *redis.Client) (int, error) {
	nodes, err := node.ClusterNodes(ctx).Result()
	if err != nil {
		return 0, err
	}
	for line := range strings.SplitSeq(nodes, "\n") {
		f := strings.Fields(line)
		if len(f) < 8 || !strings.Contains(f[2], "myself") {
			continue
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue
			}
			lo, _, _ := strings.Cut(r, "-")
			if n, err := strconv.Atoi(lo); err == nil {
				return n, nil
			}
		}
		return 0, errors.New("serves no slot")
	}
	return 0, errors.New("no myself line in CLUSTER NODES")
}

// tagForSlot returns a hash tag, "rN", whose keys live in slot.
func tagForSlot(slot int) string {
	for n := 0; ; n++ {
		tag := "r" + strconv.Itoa(n)
		if int(crc16(tag)%16384) == slot {
			return tag
		}
	}
}

// crc16 is Redis Cluster's key hash: CRC-16/XMODEM.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
