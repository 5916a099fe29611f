package redislayout

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/correx/sessions/pkg/wire"
	"github.com/redis/go-redis/v9"
)

// RecentMismatches is how many of the verifier's last mismatches the
// report keeps.
const RecentMismatches = 20

// VerifyDelta is what a verifier adds to the topic's report: counts since
// its last publication, and the mismatches it found meanwhile.
type VerifyDelta struct {
	Checked      int64
	Mismatches   map[string]int64
	Repaired     int64
	Unverifiable int64
	Recent       []wire.VerifyMismatch // oldest first
	// Cycle, when set, is a cycle that ended.
	Cycle *wire.VerifyCycle
}

// Empty reports whether d adds nothing.
func (d *VerifyDelta) Empty() bool {
	n := d.Checked + d.Repaired + d.Unverifiable
	for _, v := range d.Mismatches {
		n += v
	}
	return n == 0 && len(d.Recent) == 0 && d.Cycle == nil
}

// PublishVerify adds d to the report of a topic (Keys.Verify and
// Keys.VerifyRecent): the counters are incremented (HINCRBY), so every
// projector's verifier adds its own and none is lost to another's write;
// the last cycle is overwritten by whichever ended last; the mismatches
// are pushed in front of the list, which is cut to RecentMismatches. The
// report is not fenced: it is a view for people (GET /v1/verify), not
// state anything is folded from, and what a stale owner adds did happen.
func PublishVerify(ctx context.Context, rdb redis.UniversalClient, k *Keys, topic string, d VerifyDelta) error {
	if d.Empty() {
		return nil
	}
	key, recent := k.Verify(topic), k.VerifyRecent(topic)
	pipe := rdb.Pipeline()
	if d.Checked > 0 {
		pipe.HIncrBy(ctx, key, "checked", d.Checked)
	}
	for kind, n := range d.Mismatches {
		if n > 0 {
			pipe.HIncrBy(ctx, key, "mismatches:"+kind, n)
		}
	}
	if d.Repaired > 0 {
		pipe.HIncrBy(ctx, key, "repaired", d.Repaired)
	}
	if d.Unverifiable > 0 {
		pipe.HIncrBy(ctx, key, "unverifiable", d.Unverifiable)
	}
	if d.Cycle != nil {
		b, err := json.Marshal(d.Cycle)
		if err != nil {
			return err
		}
		pipe.HSet(ctx, key, "cycle", b)
	}
	if len(d.Recent) > 0 {
		vals := make([]any, len(d.Recent))
		for i, m := range d.Recent {
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			vals[i] = b
		}
		pipe.LPush(ctx, recent, vals...)
		pipe.LTrim(ctx, recent, 0, RecentMismatches-1)
	}
	_, err := pipe.Exec(ctx)
	return err
}

// ReadVerify reads the report of a topic; an empty report (no verifier
// has published) has zero counts, every kind listed, and no cycle.
func ReadVerify(ctx context.Context, rdb redis.UniversalClient, k *Keys, topic string) (wire.Verify, error) {
	out := wire.Verify{Topic: topic, Mismatches: map[string]int64{}, Recent: []wire.VerifyMismatch{}}
	for _, kind := range wire.VerifyKinds {
		out.Mismatches[kind] = 0
	}
	pipe := rdb.Pipeline()
	h := pipe.HGetAll(ctx, k.Verify(topic))
	l := pipe.LRange(ctx, k.VerifyRecent(topic), 0, RecentMismatches-1)
	if _, err := pipe.Exec(ctx); err != nil && err != redis.Nil {
		return out, err
	}
	for field, v := range h.Val() {
		if field == "cycle" {
			var c wire.VerifyCycle
			if json.Unmarshal([]byte(v), &c) == nil {
				out.LastCycle = &c
			}
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch {
		case field == "checked":
			out.Checked = n
		case field == "repaired":
			out.Repaired = n
		case field == "unverifiable":
			out.Unverifiable = n
		case strings.HasPrefix(field, "mismatches:"):
			out.Mismatches[strings.TrimPrefix(field, "mismatches:")] = n
		}
	}
	for _, v := range l.Val() {
		var m wire.VerifyMismatch
		if json.Unmarshal([]byte(v), &m) == nil {
			out.Recent = append(out.Recent, m)
		}
	}
	return out, nil
}
