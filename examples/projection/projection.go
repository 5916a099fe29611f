package main

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/correx/sessions/pkg/feed"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/redis/go-redis/v9"
)

// Projection keeps two views of the feed in Redis, under its own keys:
// active (not terminal) sessions per label value, and per day (UTC, of the
// grant) the number of granted approvals and their summed wait, from
// ApprovalRequested to ApprovalGranted. Keys, all in one hash slot (the
// {name} tag) so that one script updates them together on Redis Cluster
// too:
//
//	<prefix>:{<name>}:session:<id>   hash: part, off (the last applied change), active, requested
//	<prefix>:{<name>}:active:<key>   hash: label value -> active sessions
//	<prefix>:{<name>}:approvals      hash: <day>:n, <day>:ms
//
// Apply is idempotent per change: a change at or below the session's last
// applied position changes nothing, so the projection is right even when a
// change is handed to it twice (pkg/feed delivers at least once). The
// session hashes are kept after the end, for that comparison.
type Projection struct {
	rdb  redis.UniversalClient
	base string
}

// NewProjection returns the projection stored under "<prefix>:{<name>}".
func NewProjection(rdb redis.UniversalClient, prefix, name string) *Projection {
	return &Projection{rdb: rdb, base: prefix + ":{" + name + "}"}
}

// applyScript applies one change. KEYS: the session hash, the approvals
// hash, then the active hash of each label; ARGV: partition, offset,
// outcome, type, terminal ("1"/"0"), occurredAt (ms), day, then the label
// values in the order of their keys.
var applyScript = redis.NewScript(`
local s = KEYS[1]
local part, off = redis.call('HGET', s, 'part'), redis.call('HGET', s, 'off')
if part == ARGV[1] and off and tonumber(off) >= tonumber(ARGV[2]) then return 0 end
redis.call('HSET', s, 'part', ARGV[1], 'off', ARGV[2])
if ARGV[3] ~= 'applied' then return 1 end
local was = redis.call('HGET', s, 'active') == '1'
local now = ARGV[5] ~= '1'
if was ~= now then
  local d = -1
  if now then d = 1 end
  for i = 3, #KEYS do
    redis.call('HINCRBY', KEYS[i], ARGV[7 + i - 2], d)
  end
  redis.call('HSET', s, 'active', now and '1' or '0')
end
if ARGV[4] == 'ApprovalRequested' then
  redis.call('HSET', s, 'requested', ARGV[6])
elseif ARGV[4] == 'ApprovalGranted' then
  local req = redis.call('HGET', s, 'requested')
  if req then
    local waited = tonumber(ARGV[6]) - tonumber(req)
    if waited < 0 then waited = 0 end
    redis.call('HINCRBY', KEYS[2], ARGV[7] .. ':n', 1)
    redis.call('HINCRBY', KEYS[2], ARGV[7] .. ':ms', waited)
    redis.call('HDEL', s, 'requested')
  end
end
return 1`)

// Apply folds one change into the views; it is the feed.Consumer handler.
func (p *Projection) Apply(ctx context.Context, c feed.Change) error {
	keys := make([]string, 0, len(c.Labels))
	for k := range c.Labels {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	redisKeys := []string{p.base + ":session:" + c.SessionID, p.base + ":approvals"}
	terminal := "0"
	if c.Terminal {
		terminal = "1"
	}
	at := c.OccurredAt.UTC()
	args := []any{c.Position.Partition, c.Position.Offset, c.Outcome, c.Type, terminal, at.UnixMilli(), at.Format(time.DateOnly)}
	for _, k := range keys {
		redisKeys = append(redisKeys, p.base+":active:"+k)
		args = append(args, c.Labels[k])
	}
	return applyScript.Run(ctx, p.rdb, redisKeys, args...).Err()
}

// Active returns the active sessions per value of a label key (values with
// none are left out).
func (p *Projection) Active(ctx context.Context, key string) (map[string]int64, error) {
	m, err := p.rdb.HGetAll(ctx, p.base+":active:"+key).Result()
	if err != nil {
		return nil, err
	}
	out := map[string]int64{}
	for v, n := range m {
		if c, err := strconv.ParseInt(n, 10, 64); err == nil && c > 0 {
			out[v] = c
		}
	}
	return out, nil
}

// ApprovalDay is one day's granted approvals and their mean wait.
type ApprovalDay struct {
	Day       string  `json:"day"`
	Approvals int64   `json:"approvals"`
	MeanMs    float64 `json:"meanMs"`
}

// ApprovalTimes returns the days with granted approvals, oldest first.
func (p *Projection) ApprovalTimes(ctx context.Context) ([]ApprovalDay, error) {
	m, err := p.rdb.HGetAll(ctx, p.base+":approvals").Result()
	if err != nil {
		return nil, err
	}
	out := []ApprovalDay{}
	for f, v := range m {
		day, ok := strings.CutSuffix(f, ":n")
		if !ok {
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ms, _ := strconv.ParseInt(m[day+":ms"], 10, 64)
		if n > 0 {
			out = append(out, ApprovalDay{Day: day, Approvals: n, MeanMs: float64(ms) / float64(n)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Day < out[j].Day })
	return out, nil
}

// Handler serves GET /active?label=<key> and GET /approval-times.
func (p *Projection) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /active", func(w http.ResponseWriter, r *http.Request) {
		key := r.URL.Query().Get("label")
		if !fsm.ValidLabelKey(key) {
			problem(w, http.StatusBadRequest, "label", "must be a label key: "+fsm.LabelKeyRule)
			return
		}
		m, err := p.Active(r.Context(), key)
		if err != nil {
			problem(w, http.StatusServiceUnavailable, "", "redis: "+err.Error())
			return
		}
		writeJSON(w, map[string]any{"label": key, "active": m})
	})
	mux.HandleFunc("GET /approval-times", func(w http.ResponseWriter, r *http.Request) {
		days, err := p.ApprovalTimes(r.Context())
		if err != nil {
			problem(w, http.StatusServiceUnavailable, "", "redis: "+err.Error())
			return
		}
		writeJSON(w, map[string]any{"days": days})
	})
	return mux
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

// problem writes an RFC 9457 problem, with the offending query parameter.
func problem(w http.ResponseWriter, status int, field, detail string) {
	p := map[string]any{"type": "about:blank", "title": http.StatusText(status), "status": status, "detail": detail}
	if field != "" {
		p["errors"] = []map[string]any{{"field": field, "message": detail}}
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(p)
}
