package query

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
	"github.com/correx/sessions/pkg/fsm"
)

// Retry-After of the answers 503 and 429, by what makes the request fail.
const (
	// retrySoon: a passing refusal (the read model or the archive failing,
	// no slot free for a waiting or archived read, the change feed not
	// read yet).
	retrySoon = time.Second
	// retryBusy: the bounded work is taken (replays, rebuilds, histories,
	// catch-ups, watches) or the log or the archive cannot be read.
	retryBusy = 5 * time.Second
	// retryUnconfigured: this service has no brokers or archive to serve
	// the request: retrying is for another replica, or after a restart.
	retryUnconfigured = 30 * time.Second
)

// sessionRoute returns the handler of a route of one session
// (/v1/sessions/{id} and the routes under it) that serve serves: it
// checks, in this order, the method (405 with Allow; GET takes HEAD too)
// and the id (400 naming it when outside fsm.SessionIDRule), then passes
// the id on. The scope is checked before (auth.Require), and whether the
// token may see the session after (canSee), by serve once its own
// parameters are read, so that a malformed request is a 400 whoever's
// the session.
func sessionRoute(method string, serve func(w http.ResponseWriter, r *http.Request, id string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !allowMethod(w, r, method) {
			return
		}
		id := r.PathValue("id")
		if !fsm.ValidSessionID(id) {
			badRequest(w, "id", "must be "+fsm.SessionIDRule)
			return
		}
		serve(w, r, id)
	}
}

// allowMethod reports whether the request's method is method (GET takes
// HEAD too), answering 405 with Allow when it is not.
func allowMethod(w http.ResponseWriter, r *http.Request, method string) bool {
	allow := method
	switch {
	case r.Method == method:
		return true
	case method == http.MethodGet && r.Method == http.MethodHead:
		return true
	case method == http.MethodGet:
		allow = "GET, HEAD"
	}
	w.Header().Set("Allow", allow)
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMethod, Status: http.StatusMethodNotAllowed,
		Detail: r.Method + " is not allowed here; use " + method})
	return false
}

// onlyGET is allowMethod for the routes that only read.
func onlyGET(w http.ResponseWriter, r *http.Request) bool { return allowMethod(w, r, http.MethodGet) }

// tooMany answers 429 with Retry-After: a bound of the open watches or of
// the resumed ones waiting to catch up is reached.
func tooMany(w http.ResponseWriter, detail string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(retryBusy/time.Second)))
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeRateLimited, Status: http.StatusTooManyRequests, Detail: detail})
}

func badRequest(w http.ResponseWriter, field, msg string) {
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeValidation, Status: http.StatusBadRequest, Detail: field + ": " + msg,
		Errors: []httpx.FieldError{{Field: field, Message: msg}}})
}

// notFound answers 404 for a session that does not exist or that the
// token may not see (outside its prefix): the two answers are the same
// bytes, so a tenant cannot learn which of another tenant's ids exist. The
// id is left out of the body since the caller knows it.
func notFound(w http.ResponseWriter) {
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeNotFound, Status: http.StatusNotFound, Detail: "no such session"})
}

// visible reports whether the request's principal may see the session.
func visible(r *http.Request, id string) bool { return auth.PrincipalFrom(r.Context()).Owns(id) }

// canSee reports whether the request's principal may see the session,
// answering 404 (notFound's bytes) when it may not.
func canSee(w http.ResponseWriter, r *http.Request, id string) bool {
	if !visible(r, id) {
		notFound(w)
		return false
	}
	return true
}

func (h *Handler) storeError(w http.ResponseWriter, err error) {
	h.log.Error("store", "err", err)
	httpx.Unavailable(w, retrySoon, "the read model is unavailable", nil)
}

// parseLimit reads the limit parameter of a listing: def when absent or
// empty, otherwise an integer from 1 to most (a 400 naming it if not).
func parseLimit(w http.ResponseWriter, q url.Values, def, most int) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > most {
		badRequest(w, "limit", fmt.Sprintf("must be an integer from 1 to %d", most))
		return 0, false
	}
	return n, true
}
