package query

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/httpx"
)

func onlyGET(w http.ResponseWriter, r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead {
		return true
	}
	w.Header().Set("Allow", "GET, HEAD")
	httpx.WriteProblem(w, httpx.Problem{Type: httpx.TypeMethod, Status: http.StatusMethodNotAllowed,
		Detail: r.Method + " is not allowed here; use GET"})
	return false
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

func (h *Handler) storeError(w http.ResponseWriter, err error) {
	h.log.Error("store", "err", err)
	httpx.Unavailable(w, time.Second, "the read model is unavailable", nil)
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
