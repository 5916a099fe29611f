package query

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// A finite events log (CORREX_EVENTS_RETENTION, docs/guarantees.md): once Kafka
// has deleted a session's first events (retention, or DeleteRecords),
// folding it again from its first offset is impossible. The history, the
// replay and the rebuild of such a session answer 409 history-truncated,
// naming the partition, the session's first offset and the earliest offset
// the log still holds, instead of folding a part of the session. A
// rebuild of a truncated session is refused too: rebuilding it from the
// snapshot changelog would need the changelog's record of the session,
// which this service does not read.

// TypeHistoryTruncated is the problem type of a session whose first events
// have left the log (409): pkg/wire's.
const TypeHistoryTruncated = wire.ProblemHistoryTruncated

// LogStarts tells where each partition of the events topic starts now: the
// log start offsets (KafkaPartitions).
type LogStarts interface {
	StartOffsets(ctx context.Context) (map[int32]int64, error)
}

// logStartsEvery is how long the log start offsets are kept before they
// are asked again. They only grow, so a kept value is at most this late in
// seeing a truncation.
const logStartsEvery = time.Second

// logStartCache keeps the last answer of a LogStarts for logStartsEvery.
// Safe for concurrent use.
type logStartCache struct {
	src   LogStarts // nil: the log is taken as whole
	every time.Duration
	mu    sync.Mutex
	at    time.Time
	last  map[int32]int64
}

// start is where partition p starts (0 when unknown).
func (c *logStartCache) start(ctx context.Context, p int32) (int64, error) {
	if c.src == nil {
		return 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || time.Since(c.at) >= c.every {
		ctx, cancel := context.WithTimeout(ctx, partitionsTimeout)
		m, err := c.src.StartOffsets(ctx)
		cancel()
		if err != nil {
			return 0, err
		}
		c.last, c.at = m, time.Now()
	}
	return c.last[p], nil
}

// truncated answers 409 history-truncated, and returns true, when the log
// no longer holds stored's first events; what names the operation. A log
// start that cannot be read is answered 503.
func (h *Handler) truncated(w http.ResponseWriter, r *http.Request, stored *snapshot.Snapshot, what string) bool {
	p := stored.Position.Partition
	start, err := h.logStarts.start(r.Context(), p)
	if err != nil {
		h.log.Warn(what, "session", stored.ID, "err", err)
		httpx.Unavailable(w, retryBusy, what+": reading where the log starts failed: "+err.Error(), nil)
		return true
	}
	if stored.FirstOffset >= start {
		return false
	}
	httpx.WriteProblem(w, httpx.Problem{Type: TypeHistoryTruncated, Status: http.StatusConflict,
		Detail: fmt.Sprintf("the log no longer holds the first events of this session (%s): partition %d starts at offset %d, the session at %d",
			what, p, start, stored.FirstOffset),
		Extra: map[string]any{"partition": p, "firstOffset": stored.FirstOffset, "earliestOffset": start}})
	return true
}
