package query

import (
	"context"
	"net/http"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/wire"
)

// VerifyReporter reads the background verifiers' report; *snapshot.Store
// is one. A Store that is not answers GET /v1/verify 503.
type VerifyReporter interface {
	VerifyReport(ctx context.Context, topic string) (wire.Verify, error)
}

// verify answers GET /v1/verify (scope admin, a token without a
// session-id prefix): what the projectors'
// background verifiers found (docs/verification.md). The projectors
// publish it in Redis (internal/redislayout's verify.go): counters each
// verifier increments, its last mismatches in a list cut to 20, and the
// last cycle any of them completed.
func (h *Handler) verify(w http.ResponseWriter, r *http.Request) {
	if !onlyGET(w, r) {
		return
	}
	if auth.PrincipalFrom(r.Context()).SessionPrefix() != "" {
		httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeForbidden, Status: http.StatusForbidden,
			Detail: "the verification report names every tenant's sessions: it needs an admin token without a session-id prefix"})
		return
	}
	vr, ok := h.store.(VerifyReporter)
	if !ok {
		httpx.Unavailable(w, retryUnconfigured, "this store keeps no verification report", nil)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), RedisTimeout)
	defer cancel()
	rep, err := vr.VerifyReport(ctx, h.topic)
	if err != nil {
		h.storeError(w, err)
		return
	}
	httpx.WriteJSON(w, http.StatusOK, rep)
}
