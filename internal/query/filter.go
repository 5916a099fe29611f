package query

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/pkg/fsm"
	"github.com/correx/sessions/pkg/snapshot"
	"github.com/correx/sessions/pkg/wire"
)

// sessionFilter is what a listing (GET /v1/sessions) or a watch (GET
// /v1/watch) asks for: ?state=, ?prefix=, ?label=KEY=VALUE (repeatable) and
// ?parent=, within the token's own prefix; every condition set must hold.
// One parser serves both, so that they accept and refuse the same
// requests with the same words.
type sessionFilter struct {
	state  fsm.State // fsm.StateNone: any state
	prefix string    // the token's prefix, or a narrower one
	none   bool      // a prefix outside the token's: nothing passes
	labels []fsm.Label
	parent string
}

// parseSessionFilter reads the filter of a request, answering 400 itself
// when a parameter is malformed. prefix narrows within the token's own
// prefix: a wider one is the token's, one outside it passes nothing.
func parseSessionFilter(w http.ResponseWriter, r *http.Request) (sessionFilter, bool) {
	q := r.URL.Query()
	f := sessionFilter{prefix: auth.PrincipalFrom(r.Context()).SessionPrefix()}
	if v := q.Get("state"); v != "" {
		s, ok := fsm.ParseState(v)
		if !ok {
			badRequest(w, "state", stateMessage)
			return f, false
		}
		f.state = s
	}
	if v := q.Get("prefix"); v != "" {
		if !fsm.ValidSessionID(v) {
			badRequest(w, "prefix", "must be "+fsm.SessionIDRule)
			return f, false
		}
		switch {
		case strings.HasPrefix(v, f.prefix):
			f.prefix = v
		case !strings.HasPrefix(f.prefix, v):
			f.none = true
		}
	}
	var ok bool
	if f.labels, f.parent, ok = labelsAndParent(w, q); !ok {
		return f, false
	}
	return f, true
}

// labelsAndParent reads the repeatable ?label=KEY=VALUE (all must hold) and
// ?parent=ID, answering 400 itself when one is malformed. A session has at
// most fsm.MaxLabels labels, so more conditions could never all hold.
func labelsAndParent(w http.ResponseWriter, q url.Values) ([]fsm.Label, string, bool) {
	var labels []fsm.Label
	if len(q["label"]) > fsm.MaxLabels {
		badRequest(w, "label", fmt.Sprintf("at most %d label conditions", fsm.MaxLabels))
		return nil, "", false
	}
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		switch {
		case !ok || !fsm.ValidLabelKey(k):
			badRequest(w, "label", "must be KEY=VALUE with KEY matching "+fsm.LabelKeyRule)
			return nil, "", false
		case len(v) > fsm.MaxLabelValueBytes:
			badRequest(w, "label", fmt.Sprintf("value is %d bytes; the limit is %d", len(v), fsm.MaxLabelValueBytes))
			return nil, "", false
		}
		labels = append(labels, fsm.Label{Key: k, Value: v})
	}
	var parent string
	if v, ok := q["parent"]; ok {
		if len(v) != 1 || !fsm.ValidSessionID(v[0]) {
			badRequest(w, "parent", "must be one session id of "+fsm.SessionIDRule)
			return nil, "", false
		}
		parent = v[0]
	}
	return labels, parent, true
}

// store returns the conditions the snapshot store checks as it lists
// (the state and the prefix are the listing's own arguments).
func (f *sessionFilter) store() snapshot.Filter {
	return snapshot.Filter{Labels: f.labels, Parent: f.parent}
}

// matchChange reports whether a change record passes: its session is
// within the prefix, and its new state (to), labels and parent are those
// asked for.
func (f *sessionFilter) matchChange(c *wire.Change) bool {
	if f.none || !strings.HasPrefix(c.SessionID, f.prefix) ||
		(f.state != fsm.StateNone && c.To != f.state.String()) ||
		(f.parent != "" && c.ParentSessionID != f.parent) {
		return false
	}
	for _, l := range f.labels {
		if v, ok := c.Labels[l.Key]; !ok || v != l.Value {
			return false
		}
	}
	return true
}
