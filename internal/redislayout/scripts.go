package redislayout

import (
	"context"
	"fmt"
	"strings"

	"github.com/correx/sessions/pkg/fsm"
	"github.com/redis/go-redis/v9"
)

// luaStateNames is a Lua table literal of the state names by state code.
var luaStateNames = func() string {
	names := make([]string, 0, fsm.NumStates-1)
	for _, s := range fsm.States() {
		names = append(names, "'"+s.String()+"'")
	}
	return "{" + strings.Join(names, ",") + "}"
}()

// luaHeader defines header(v), which reads the position and the state from
// the first 14 bytes of an encoded snapshot (see pkg/snapshot's binary.go), with one
// string.byte call.
const luaHeader = `
local byte = string.byte
local function header(v)
  local _, p1, p2, p3, p4, o1, o2, o3, o4, o5, o6, o7, o8, st = byte(v, 1, 14)
  return ((p1 * 256 + p2) * 256 + p3) * 256 + p4,
    ((((((o1 * 256 + o2) * 256 + o3) * 256 + o4) * 256 + o5) * 256 + o6) * 256 + o7) * 256 + o8, st
end
`

// PutScript stores snapshots with offset fencing, ownership fencing and
// tombstones.
//
//	KEYS   per group: the bucket's state index, the bucket's epochs (hash),
//	       then per entry its snapshot key and its tombstone hash
//	ARGV   per group: n, then n triples (session id, encoded snapshot,
//	       the writer's epoch of the snapshot's partition or 0)
//
// A snapshot replaces the stored one only if its (partition, offset) is
// greater; equal and lower positions lose. The stored position and state are
// read from the stored value's 14-byte header with GETRANGE, so the stored
// bytes never enter Lua. The index holds "STATE:id" for the session's current
// state and "*:id" for every session, and moves in the same step as the
// snapshot, so listing never disagrees with a fenced write. Two entries for
// one session are compared with each other in order (the first is stored by
// the time the second is read).
//
// Before the position, ownership: an entry whose epoch is positive loses
// when the bucket's epoch of its partition is higher (a newer owner took
// the partition over, see projstore's epoch.go); and a session with a
// tombstone (archived, see projstore's tombstones.go) is never written
// again, whoever writes.
//
// On Redis Cluster each call carries one bucket's group, so every key it
// touches has the bucket's hash tag; on a single server one call carries the
// whole batch. Returns one integer per entry, in order: 1 written, 0 fenced
// by position, -1 fenced by ownership, -2 tombstoned.
//
// The per-entry cost is mostly the Lua interpreter's (about 1.5 µs against
// 0.13 µs for a SET, read from INFO commandstats); BenchmarkStorePut measures
// the whole against plain pipelined SETs.
var PutScript = redis.NewScript(putScriptSource)

// ReplaceScript is PutScript where an entry at the stored position wins
// too (see pkg/snapshot's Store.Replace).
var ReplaceScript = redis.NewScript(strings.Replace(putScriptSource, "(np == p and no <= o)", "(np == p and no < o)", 1))

var putScriptSource = luaHeader + `
local names = ` + luaStateNames + `
local out, a, k = {}, 1, 1
while k <= #KEYS do
  local idx, eps, n = KEYS[k], KEYS[k + 1], tonumber(ARGV[a])
  a = a + 1
  for j = 1, n do
    local key, tomb, id, data, ep = KEYS[k + 2 * j], KEYS[k + 2 * j + 1], ARGV[a], ARGV[a + 1], tonumber(ARGV[a + 2])
    a = a + 3
    local np, no, ns = header(data)
    local verdict = 1
    if ep > 0 then
      local owner = redis.call('HGET', eps, np)
      if owner and tonumber(owner) > ep then verdict = -1 end
    end
    if verdict == 1 and redis.call('HEXISTS', tomb, id) == 1 then verdict = -2 end
    local old = nil
    if verdict == 1 then
      local cur = redis.call('GETRANGE', key, 0, 13)
      if #cur == 14 then
        local p, o, st = header(cur)
        if np < p or (np == p and no <= o) then verdict = 0 else old = st end
      end
    end
    if verdict == 1 then
      redis.call('SET', key, data)
      if old == nil then
        redis.call('ZADD', idx, 0, '*:' .. id, 0, names[ns] .. ':' .. id)
      elseif old ~= ns then
        if names[old] then redis.call('ZREM', idx, names[old] .. ':' .. id) end
        redis.call('ZADD', idx, 0, names[ns] .. ':' .. id)
      end
    end
    out[#out + 1] = verdict
  end
  k = k + 2 * n + 2
end
return out
`

// CheckpointScript advances per-partition checkpoints monotonically.
//
//	KEYS[1]   the topic's checkpoint hash
//	ARGV[1]   the writer's time, Unix milliseconds
//	then per partition: partition, next offset, high watermark, expected (0/1),
//	the offset the writer knows is stored, the writer's epoch (0: none)
//
// A lower offset never replaces a higher one; an equal one refreshes the
// time and the high watermark (so an idle, caught-up projector shows a fresh
// checkpoint time). An expected checkpoint that is missing, or stored lower
// than the writer knows it was, is not written: the store lost it (emptied,
// or gone back in time), and the writer must rebuild rather than record
// progress over the hole. A written offset at or past the partition's
// rebuild mark (see ResetCheckpointScript) ends the rebuild: the mark goes.
// A writer whose epoch is lower than the partition's (field
// "<partition>:ep", see projstore's epoch.go) writes nothing: a newer
// owner took the partition over.
// Returns, per partition, the offset stored before the call, -1 when
// there was none, or -2 when the writer no longer owns the partition.
var CheckpointScript = redis.NewScript(`
local out = {}
for i = 2, #ARGV, 6 do
  local p, o, hw, expected, known, ep = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2], ARGV[i + 3], tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  local owner = redis.call('HGET', KEYS[1], p .. ':ep')
  local cur = redis.call('HGET', KEYS[1], p)
  if ep > 0 and owner and tonumber(owner) > ep then
    out[#out + 1] = -2
  else
  if cur then out[#out + 1] = tonumber(cur) else out[#out + 1] = -1 end
  if (cur and tonumber(cur) <= o and (expected == '0' or tonumber(cur) >= known)) or (not cur and expected == '0') then
    redis.call('HSET', KEYS[1], p, o, p .. ':t', ARGV[1], p .. ':hw', hw)
    local rb = redis.call('HGET', KEYS[1], p .. ':rb')
    if rb and o >= tonumber(rb) then
      redis.call('HDEL', KEYS[1], p .. ':rb')
    end
  end
  end
end
return out
`)

// ResetCheckpointScript puts a partition's checkpoint back to offset 0,
// whatever is stored, and marks the partition as being rebuilt until its
// checkpoint reaches a given offset.
//
//	KEYS[1]   the topic's checkpoint hash
//	ARGV[1]   the writer's time, Unix milliseconds
//	ARGV[2]   the partition
//	ARGV[3]   the offset the rebuild runs to (the mark)
//	ARGV[4]   the writer's epoch (0: none)
//
// Returns 1, or -2 (nothing written) when the writer's epoch is lower than
// the partition's.
var ResetCheckpointScript = redis.NewScript(`
local p = ARGV[2]
local owner = redis.call('HGET', KEYS[1], p .. ':ep')
if tonumber(ARGV[4]) > 0 and owner and tonumber(owner) > tonumber(ARGV[4]) then return -2 end
redis.call('HSET', KEYS[1], p, 0, p .. ':t', ARGV[1], p .. ':hw', -1, p .. ':rb', ARGV[3])
return 1
`)

// CountScript counts the sessions per state in one bucket's index, among
// the sessions whose id starts with a prefix.
//
//	KEYS[1]   the bucket's state index
//	ARGV[1]   the session-id prefix ("" for every session)
//
// Returns the counts in state-code order, then the number of sessions.
var CountScript = redis.NewScript(`
local names = ` + luaStateNames + `
local p = ARGV[1] or ''
local out = {}
for i, n in ipairs(names) do
  out[i] = redis.call('ZLEXCOUNT', KEYS[1], '[' .. n .. ':' .. p, '[' .. n .. ':' .. p .. '\255')
end
out[#names + 1] = redis.call('ZLEXCOUNT', KEYS[1], '[*:' .. p, '[*:' .. p .. '\255')
return out
`)

// DeletePartitionScript deletes, in one bucket, the snapshots whose position
// is on one of the given partitions, and their index entries, reading the
// bucket's snapshots once whatever the number of partitions. It reads each
// snapshot's header with GETRANGE; the snapshot keys are built from the
// bucket's key base, so they share the bucket's hash tag (one Cluster slot).
//
//	KEYS[1]   the bucket's state index
//	KEYS[2]   the bucket's epochs
//	ARGV[1]   the bucket's snapshot key base ("<prefix>:{bNNN}:s:")
//	ARGV[2..] pairs: a partition, and the writer's epoch of it (0: none)
//
// Returns how many snapshots it deleted, or -i (nothing deleted) when the
// writer's epoch of the i-th partition (from 1) is lower than the bucket's
// epoch of it. Tombstones stay: they say what was archived, which a
// rebuild must not bring back.
var DeletePartitionScript = redis.NewScript(luaHeader + `
local names = ` + luaStateNames + `
local want = {}
for i = 2, #ARGV, 2 do
  local owner = redis.call('HGET', KEYS[2], ARGV[i])
  if tonumber(ARGV[i + 1]) > 0 and owner and tonumber(owner) > tonumber(ARGV[i + 1]) then return -(i / 2) end
  want[tonumber(ARGV[i])] = true
end
local members = redis.call('ZRANGEBYLEX', KEYS[1], '[*:', '[*:\255')
local n = 0
for _, m in ipairs(members) do
  local id = string.sub(m, 3)
  local key = ARGV[1] .. id
  local h = redis.call('GETRANGE', key, 0, 13)
  if #h == 14 then
    local p, _, st = header(h)
    if want[p] then
      redis.call('DEL', key)
      if names[st] then
        redis.call('ZREM', KEYS[1], m, names[st] .. ':' .. id)
      else
        redis.call('ZREM', KEYS[1], m)
      end
      n = n + 1
    end
  end
end
return n
`)

// The scripts below are the projector's own storage's
// (internal/projector/projstore): its outbox, its armed deadlines,
// whose entries projstore's deadlines.go describes, and the closed
// sessions' index and removal (projstore's closed.go).

// OutboxScript stores outbox batches of one topic and drops those the
// checkpoints passed, fenced by ownership: the outbox hash keeps each
// partition's epoch in its field "<partition>:ep" (raised by a claim, like
// the checkpoints' hash), and a batch whose writer's epoch is below it is
// not written. A batch it writes drops the partition's batches below its
// Below first.
//
//	KEYS  the topic's outbox (hash; field "<partition>:<last>", and
//	      "<partition>:ep")
//	ARGV  n, then n quintuples (partition, last, data, below, the writer's
//	      epoch or 0 for none)
//
// It returns the partitions whose batches were refused (an array, empty
// when every batch was written).
var OutboxScript = redis.NewScript(luaStale + `
local n = tonumber(ARGV[1])
local fields = redis.call('HKEYS', KEYS[1])
local refused = {}
for i = 0, n - 1 do
  local p, last, data, below, mine = ARGV[2 + i * 5], ARGV[3 + i * 5], ARGV[4 + i * 5], tonumber(ARGV[5 + i * 5]), ARGV[6 + i * 5]
  if stale(redis.call('HGET', KEYS[1], p .. ':ep'), mine) then
    refused[#refused + 1] = tonumber(p)
  else
    for _, f in ipairs(fields) do
      local fp, fl = string.match(f, '^(%d+):(%d+)$')
      if fp == p and tonumber(fl) < below then redis.call('HDEL', KEYS[1], f) end
    end
    redis.call('HSET', KEYS[1], p .. ':' .. last, data)
  end
end
return refused
`)

// luaStale defines stale(owner, mine): whether a writer with epoch mine
// (a string, "0" for none) writes below the stored epoch owner (a string
// or false when none is stored). See projstore's epoch.go.
const luaStale = `
local function stale(owner, mine)
  local m = tonumber(mine)
  return m > 0 and owner and tonumber(owner) > m
end
`

// ArmScript arms, re-arms and disarms, fenced by version, and records
// the sessions that ended in the partition's closed set.
//
//	KEYS   the partition's due set, its armed hash, its closed set, then its epoch
//	ARGV   the writer's epoch (0: none), then quintuples (session id,
//	       version, value or "" to disarm, score, the end in Unix ms of a
//	       session that ended, or 0)
//
// It returns the earliest score left in the due set, or "" when it is
// empty; or -1, having written nothing, when the writer's epoch is lower
// than the partition's. A closed entry is written whatever the version: a
// session that ended stays ended, at the same end time.
var ArmScript = redis.NewScript(luaStale + `
local z, h, c = KEYS[1], KEYS[2], KEYS[3]
if stale(redis.call('GET', KEYS[4]), ARGV[1]) then return -1 end
for i = 2, #ARGV, 5 do
  local sid, v, val = ARGV[i], tonumber(ARGV[i+1]), ARGV[i+2]
  local cur = redis.call('HGET', h, sid)
  if not cur or tonumber(string.match(cur, '^(%d+):')) <= v then
    if val == '' then
      if cur then
        redis.call('HDEL', h, sid)
        redis.call('ZREM', z, sid)
      end
    elseif cur ~= val and cur ~= val .. ':fired' then
      redis.call('HSET', h, sid, val)
      redis.call('ZADD', z, ARGV[i+3], sid)
    end
  end
  if ARGV[i+4] ~= '0' then
    redis.call('ZADD', c, ARGV[i+4], sid)
  end
end
local first = redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')
return first[2] or ''
`)

// DueScript reads the entries due at a time.
//
//	KEYS   the partition's due set, then its armed hash
//	ARGV   the time (Unix ms), the most entries to return
//
// It returns pairs (session id, value), then the earliest score left after
// them ("" when none).
var DueScript = redis.NewScript(`
local z, h = KEYS[1], KEYS[2]
local ids = redis.call('ZRANGEBYSCORE', z, '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
local out = {}
local gone = 0
for _, sid in ipairs(ids) do
  local v = redis.call('HGET', h, sid)
  if v and string.sub(v, -6) ~= ':fired' then
    out[#out+1] = sid
    out[#out+1] = v
  else
    redis.call('ZREM', z, sid)
    gone = gone + 1
  end
end
local nxt = redis.call('ZRANGE', z, #ids - gone, #ids - gone, 'WITHSCORES')
out[#out+1] = nxt[2] or ''
return out
`)

// FiredScript marks fired the entries that still hold what was fired:
// it takes them out of the due set and keeps them in the hash, marked.
//
//	KEYS   the partition's due set, its armed hash, then its epoch
//	ARGV   the writer's epoch (0: none), then pairs (session id, value fired)
//
// It returns how many it marked, or -1 (none) when the writer's epoch is
// lower than the partition's.
var FiredScript = redis.NewScript(luaStale + `
local z, h = KEYS[1], KEYS[2]
if stale(redis.call('GET', KEYS[3]), ARGV[1]) then return -1 end
local n = 0
for i = 2, #ARGV, 2 do
  if redis.call('HGET', h, ARGV[i]) == ARGV[i+1] then
    redis.call('HSET', h, ARGV[i], ARGV[i+1] .. ':fired')
    redis.call('ZREM', z, ARGV[i])
    n = n + 1
  end
end
return n
`)

// ForgetScript removes an archived session from the read model: its
// snapshot, its state index entries and its children index, only if the
// stored snapshot is still at the archived position (an event folded
// since keeps it, for the next sweep to archive again), and leaves its
// tombstone in the same step.
//
//	KEYS   the session's bucket's state index, its snapshot key, its
//	       children key, the bucket's epochs, the session's tombstone hash
//	ARGV   the session id, the archived position's partition and offset,
//	       the writer's epoch (0: none), the tombstone, the partition
//	       swept (whose epoch fences the call)
//
// Returns 1 removed, 0 kept (the stored position moved), -1 no snapshot,
// -2 nothing done: the writer's epoch is lower than the partition's.
var ForgetScript = redis.NewScript(luaHeader + luaStale + `
local names = ` + luaStateNames + `
if stale(redis.call('HGET', KEYS[4], ARGV[6]), ARGV[4]) then return -2 end
local h = redis.call('GETRANGE', KEYS[2], 0, 13)
if #h ~= 14 then return -1 end
local p, o, st = header(h)
if p ~= tonumber(ARGV[2]) or o ~= tonumber(ARGV[3]) then return 0 end
redis.call('DEL', KEYS[2], KEYS[3])
if names[st] then
  redis.call('ZREM', KEYS[1], '*:' .. ARGV[1], names[st] .. ':' .. ARGV[1])
else
  redis.call('ZREM', KEYS[1], '*:' .. ARGV[1])
end
redis.call('HSET', KEYS[5], ARGV[1], ARGV[5])
return 1
`)

// ForgetClosedScript removes sessions that left the read model from their
// partition's closed set and deadline store.
//
//	KEYS   the partition's closed set, due set, armed hash, then its epoch
//	ARGV   the writer's epoch (0: none), then the session ids
//
// Returns how many closed entries it removed, or -1 (none) when the
// writer's epoch is lower than the partition's.
var ForgetClosedScript = redis.NewScript(luaStale + `
if stale(redis.call('GET', KEYS[4]), ARGV[1]) then return -1 end
local n = 0
for i = 2, #ARGV do
  local sid = ARGV[i]
  n = n + redis.call('ZREM', KEYS[1], sid)
  redis.call('ZREM', KEYS[2], sid)
  redis.call('HDEL', KEYS[3], sid)
end
return n
`)

// DeleteDeadlinesScript deletes a partition's deadlines and closed
// sessions (before a rebuild).
//
//	KEYS   the partition's due set, armed hash, closed set, then its epoch
//	ARGV   the writer's epoch (0: none)
//
// Returns 1, or -1 (nothing deleted) when the writer's epoch is lower than
// the partition's.
var DeleteDeadlinesScript = redis.NewScript(luaStale + `
if stale(redis.call('GET', KEYS[4]), ARGV[1]) then return -1 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
return 1
`)

// ClaimScript takes a partition over: its new epoch is one more than the
// stored one, or the Kafka group's generation when that is higher, so
// that an epoch outlives Redis's loss of the key as long as the group's
// generation does, and Kafka's loss of the group as long as Redis keeps
// the key.
//
//	KEYS[1]   the partition's epoch
//	ARGV[1]   the group's generation
//
// Returns the new epoch.
var ClaimScript = redis.NewScript(`
local cur = tonumber(redis.call('GET', KEYS[1]) or '0')
local e = math.max(cur + 1, tonumber(ARGV[1]))
redis.call('SET', KEYS[1], e)
return e
`)

// RaiseEpochScript raises a partition's epoch in a hash (a bucket's
// epochs, or the checkpoints' field "<partition>:ep") to a claimed one,
// never lowering it.
//
//	KEYS[1]   the hash
//	ARGV[1]   the field, ARGV[2] the claimed epoch
//
// Returns the epoch stored afterwards.
var RaiseEpochScript = redis.NewScript(`
local cur = tonumber(redis.call('HGET', KEYS[1], ARGV[1]) or '0')
local e = tonumber(ARGV[2])
if cur < e then
  redis.call('HSET', KEYS[1], ARGV[1], e)
  return e
end
return cur
`)

// TombstoneScript writes tombstones (a restore's, from the changelog's
// archived records), fenced by ownership. The restore emptied the
// partition before, and its plan holds no snapshot of an archived session.
//
//	KEYS   the bucket's epochs, then per tombstone its hash
//	ARGV   the partition, the writer's epoch (0: none), then pairs
//	       (session id, tombstone)
//
// Returns how many it wrote, or -1 (none) when the writer's epoch is lower
// than the partition's.
var TombstoneScript = redis.NewScript(luaStale + `
if stale(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[2]) then return -1 end
local n = 0
for i = 3, #ARGV, 2 do
  n = n + 1
  redis.call('HSET', KEYS[n + 1], ARGV[i], ARGV[i + 1])
end
return n
`)

// ExpireTombstoneScript removes tombstones older than the tombstone
// retention (CORREX_TOMBSTONE_RETENTION), fenced by ownership, each only
// if it still holds the value read (a tombstone written again meanwhile,
// for an id used again and archived again, stays).
//
//	KEYS   the bucket's epochs, then per tombstone its hash
//	ARGV   the partition, the writer's epoch (0: none), then pairs
//	       (session id, tombstone as read)
//
// Returns how many it removed, or -1 (none) when the writer's epoch is
// lower than the partition's.
var ExpireTombstoneScript = redis.NewScript(luaStale + `
if stale(redis.call('HGET', KEYS[1], ARGV[1]), ARGV[2]) then return -1 end
local n, k = 0, 1
for i = 3, #ARGV, 2 do
  k = k + 1
  if redis.call('HGET', KEYS[k], ARGV[i]) == ARGV[i + 1] then
    n = n + redis.call('HDEL', KEYS[k], ARGV[i])
  end
end
return n
`)

var scripts = []*redis.Script{PutScript, ReplaceScript, CheckpointScript, ResetCheckpointScript, CountScript, DeletePartitionScript, OutboxScript,
	ArmScript, DueScript, FiredScript, ForgetScript, ForgetClosedScript, DeleteDeadlinesScript, ClaimScript, RaiseEpochScript, TombstoneScript,
	ExpireTombstoneScript}

// MaxCall is about how many entries one script call carries on a single
// server (measured by pkg/snapshot's BenchmarkStorePut: 512 to 1000 is
// best).
const MaxCall = 512

// Run executes the commands build adds in one pipeline on rdb and returns
// the script calls build returned. When Redis has lost its script cache (a
// restart, SCRIPT FLUSH), it loads the scripts on every node and runs the
// pipeline again, which is safe because every script here is idempotent
// (fenced snapshot writes, monotonic checkpoints, reads).
func Run(ctx context.Context, rdb redis.UniversalClient, build func(redis.Pipeliner) []*redis.Cmd) ([]*redis.Cmd, error) {
	for attempt := 0; ; attempt++ {
		pipe := rdb.Pipeline()
		cmds := build(pipe)
		_, err := pipe.Exec(ctx)
		if err == nil {
			return cmds, nil
		}
		if attempt > 0 || !redis.HasErrorPrefix(err, "NOSCRIPT") {
			return nil, err
		}
		if err := loadScripts(ctx, rdb); err != nil {
			return nil, err
		}
	}
}

func loadScripts(ctx context.Context, rdb redis.UniversalClient) error {
	load := func(ctx context.Context, c redis.Scripter) error {
		for _, sc := range scripts {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return fmt.Errorf("load script: %w", err)
			}
		}
		return nil
	}
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		return cc.ForEachShard(ctx, func(ctx context.Context, shard *redis.Client) error { return load(ctx, shard) })
	}
	return load(ctx, rdb)
}
