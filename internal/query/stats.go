package query

import (
	"context"
	"net/http"
	"sort"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/wire"
)

// Stats is the body of GET /v1/stats (pkg/wire's, which the client reads
// too).
type Stats = wire.Stats

// PartitionStats is one partition's progress.
type PartitionStats = wire.PartitionStats

func (h *Handler) stats(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	p := auth.PrincipalFrom(r.Context())
	prefix := p.SessionPrefix()
	ctx, cancel := context.WithTimeout(r.Context(), RedisTimeout)
	defer cancel()
	counts, err := h.store.CountPrefix(ctx, prefix)
	if err != nil {
		h.storeError(w, err)
		return
	}
	var st Stats
	st.Topic, st.Prefix = h.topic, prefix
	st.Sessions.Total = counts.Total
	st.Sessions.ByState = map[string]int64{}
	for _, s := range fsm.States() {
		st.Sessions.ByState[s.String()] = counts.ByState[s]
	}
	if prefix != "" || !p.Has(auth.ScopeAdmin) {
		httpx.WriteJSON(w, http.StatusOK, st)
		return
	}
	cps, err := h.store.Checkpoints(ctx, h.topic)
	if err != nil {
		h.storeError(w, err)
		return
	}
	st.Partitions = []PartitionStats{}
	for _, cp := range cps {
		ps := PartitionStats{Partition: cp.Partition, Checkpoint: cp.Offset}
		if !cp.Time.IsZero() {
			t := cp.Time
			ps.CheckpointAt = &t
		}
		if lag, ok := cp.Lag(); ok {
			hw := cp.HighWatermark
			ps.HighWatermark, ps.Lag = &hw, &lag
		}
		st.Partitions = append(st.Partitions, ps)
	}
	sort.Slice(st.Partitions, func(i, j int) bool { return st.Partitions[i].Partition < st.Partitions[j].Partition })
	httpx.WriteJSON(w, http.StatusOK, st)
}
