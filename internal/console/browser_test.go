package console_test

// Browser tests: the whole pipeline runs in-process (devstack over a real
// redis-server and the kfake broker), a known workload goes through ingest,
// and Debian's chromium, driven by chromedp, loads the console from the
// query service.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/devstack"
	"github.com/correx/sessions/internal/projector"
	"github.com/correx/sessions/internal/redisconn"
	"github.com/correx/sessions/internal/redistest"
	"github.com/correx/sessions/internal/securitytest"
	"github.com/correx/sessions/pkg/fsm"
)

// The texts that try to run script when parsed as HTML.
const (
	xssGoal   = `<script>alert("goal")</script><img src=x onerror=alert('goal')>`
	xssFail   = `<img src=x onerror=alert(1)> tool crashed`
	xssCancel = `<script>alert(2)</script> user asked`
)

// t0 is when the workload's sessions start: a fixed past time, so that
// every interval has a known length.
var t0 = time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)

// ev is one event of the workload: a session, a type, seconds after t0 and
// a payload.
type ev struct {
	id, typ string
	at      float64
	payload map[string]any
}

// workload is the known set of sessions under acme: (eight sessions, one
// per state listed in wantCounts).
func workload() []ev {
	var out []ev
	add := func(id string, evs ...ev) {
		for _, e := range evs {
			e.id = id
			out = append(out, e)
		}
	}
	add("acme:timeline",
		ev{typ: "SessionCreated", at: 0, payload: map[string]any{"goal": "draw the timeline"}},
		ev{typ: "SessionStarted", at: 1},     // CREATED 1 s
		ev{typ: "SessionPaused", at: 4},      // ACTIVE 3 s
		ev{typ: "SessionResumed", at: 6},     // PAUSED 2 s
		ev{typ: "ApprovalRequested", at: 14}, // ACTIVE 8 s
		ev{typ: "ApprovalGranted", at: 18},   // AWAITING_APPROVAL 4 s
		ev{typ: "ToolRequested", at: 19},
		ev{typ: "SessionResumed", at: 20}) // rejected: invalid_transition
	add("acme:wait-old", ev{typ: "SessionCreated", at: 0}, ev{typ: "SessionStarted", at: 1}, ev{typ: "ApprovalRequested", at: 2})
	add("acme:wait-new", ev{typ: "SessionCreated", at: 0}, ev{typ: "SessionStarted", at: 1}, ev{typ: "ApprovalRequested", at: 60})
	add("acme:paused", ev{typ: "SessionCreated", at: 0, payload: map[string]any{"labels": map[string]string{"team": "core", "env": "prod"}}},
		ev{typ: "SessionStarted", at: 1}, ev{typ: "SessionPaused", at: 30})
	add("acme:cancelling", ev{typ: "SessionCreated", at: 0}, ev{typ: "SessionStarted", at: 1},
		ev{typ: "CancellationRequested", at: 45, payload: map[string]any{"reason": "operator"}})
	add("acme:done", ev{typ: "SessionCreated", at: 0, payload: map[string]any{"labels": map[string]string{"team": "core"}}},
		ev{typ: "SessionStarted", at: 1}, ev{typ: "SessionCompleted", at: 9})
	add("acme:xss-fail", ev{typ: "SessionCreated", at: 0, payload: map[string]any{"goal": xssGoal}},
		ev{typ: "SessionStarted", at: 1}, ev{typ: "SessionFailed", at: 3, payload: map[string]any{"reason": xssFail}})
	add("acme:xss-cancel", ev{typ: "SessionCreated", at: 0, payload: map[string]any{"goal": xssGoal}},
		ev{typ: "CancellationRequested", at: 2, payload: map[string]any{"reason": xssCancel, "mode": "graceful"}},
		ev{typ: "SessionCancelled", at: 5})
	return out
}

var wantCounts = map[string]int{"TOTAL": 8, "CREATED": 0, "INITIALIZING": 0, "ACTIVE": 1, "PAUSED": 1,
	"AWAITING_APPROVAL": 2, "CANCELLING": 1, "CANCELLED": 1, "FAILED": 1, "COMPLETED": 1, "RECOVERING": 0}

// The timeline session's closed intervals, restated from the workload.
var wantIntervals = []struct {
	state string
	ms    float64
}{{"CREATED", 1000}, {"ACTIVE", 3000}, {"PAUSED", 2000}, {"ACTIVE", 8000}, {"AWAITING_APPROVAL", 4000}}

func quietLog() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// startStack starts the pipeline over a real redis-server; authCfg nil runs
// it open, as devstack does by default.
func startStack(t *testing.T, authCfg *auth.Config) *devstack.Stack {
	t.Helper()
	srv := redistest.Start(t)
	st, err := devstack.Start(context.Background(), devstack.Options{
		Redis: redisconn.Config{URL: srv.URL()}, Partitions: 3, Log: quietLog(), Auth: authCfg,
		Projector: func(c *projector.Config) {
			c.FlushInterval = 20 * time.Millisecond
			// The workload's events happened long ago, so the default
			// cancellation timeout (5m after entering CANCELLING) would
			// be due at once: the expected counts assume no deadline.
			c.Timeouts = fsm.Timeouts{}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := st.Stop(); err != nil {
			t.Errorf("stack: %v", err)
		}
	})
	return st
}

func call(t *testing.T, method, url, token string, body []byte) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// send posts events through ingest with the token writer and waits, reading
// with the token reader, until the query service has folded each session's
// last one.
func send(t *testing.T, st *devstack.Stack, writer, reader string, evs ...ev) {
	t.Helper()
	var batch []map[string]any
	for _, e := range evs {
		m := map[string]any{"sessionId": e.id, "type": e.typ,
			"occurredAt": t0.Add(time.Duration(e.at * float64(time.Second))).Format(time.RFC3339Nano)}
		if e.payload != nil {
			m["payload"] = e.payload
		}
		batch = append(batch, m)
	}
	body, _ := json.Marshal(map[string]any{"events": batch})
	status, out := call(t, http.MethodPost, st.IngestURL+"/v1/events", writer, body)
	if status != http.StatusAccepted {
		t.Fatalf("ingest: %d %s", status, out)
	}
	var acc struct {
		Accepted []struct {
			Partition int32 `json:"partition"`
			Offset    int64 `json:"offset"`
		} `json:"accepted"`
	}
	if err := json.Unmarshal(out, &acc); err != nil || len(acc.Accepted) != len(evs) {
		t.Fatalf("ingest answer: %v %s", err, out)
	}
	last := map[string]string{}
	for i, e := range evs {
		last[e.id] = fmt.Sprintf("%d:%d", acc.Accepted[i].Partition, acc.Accepted[i].Offset)
	}
	for id, pos := range last {
		if status, out := call(t, http.MethodGet, st.QueryURL+"/v1/sessions/"+id+"?minPosition="+pos+"&wait=10s", reader, nil); status != 200 {
			t.Fatalf("%s not folded up to %s: %d %s", id, pos, status, out)
		}
	}
}

// browser is a headless chromium tab with what the tests watch: dialogs
// (alert, confirm, prompt), uncaught exceptions and CSP violations.
type browser struct {
	ctx        context.Context
	dialogs    atomic.Int64
	exceptions atomic.Int64
}

// chromiumPath returns Debian's chromium; a missing browser fails the test
// unless CORREX_SKIP_BROWSER=1.
func chromiumPath(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: browser tests skipped")
	}
	if os.Getenv("CORREX_SKIP_BROWSER") == "1" {
		t.Skip("CORREX_SKIP_BROWSER=1: browser tests skipped")
	}
	for _, name := range []string{"chromium", "/usr/bin/chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("chromium is not installed: run `make deps` (installs Debian's chromium package), " +
		"or set CORREX_SKIP_BROWSER=1 to skip the browser tests")
	return ""
}

func newBrowser(t *testing.T, width, height int) *browser {
	t.Helper()
	opts := append([]chromedp.ExecAllocatorOption{}, chromedp.DefaultExecAllocatorOptions[:]...)
	opts = append(opts, chromedp.ExecPath(chromiumPath(t)), chromedp.Headless, chromedp.NoSandbox,
		chromedp.DisableGPU, chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(width, height))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	t.Cleanup(func() { cancelCtx(); cancelAlloc() })
	b := &browser{ctx: ctx}
	// The first action starts the browser; the listener and the script
	// that collects CSP violations from inside the page (scripts added
	// through the protocol are not subject to the page's policy) follow.
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(int64(width), int64(height))); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	err := chromedp.Listen(ctx, func(e any) {
		switch e := e.(type) {
		case *page.EventJavascriptDialogOpening:
			b.dialogs.Add(1)
			t.Logf("dialog opened: %s %q", e.Type, e.Message)
			go func() { _, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{}) }()
		case *runtime.EventExceptionThrown:
			b.exceptions.Add(1)
			if d := e.ExceptionDetails; d != nil {
				t.Logf("page exception: %s", d.Text)
			}
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	_, err = chromedp.Call(ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// do runs actions, failing the test with the page's text on an error; each
// call is bounded so that a wrong expectation fails instead of hanging.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText.slice(0, 2000) : ''`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, text)
	}
}

// waitJS waits until the expression is truthy.
func (b *browser) waitJS(t *testing.T, what, expr string) {
	t.Helper()
	b.do(t, what, chromedp.Poll[chromedp.Void](expr, chromedp.WithPollingTimeout(20*time.Second), chromedp.WithPollingInterval(50*time.Millisecond)))
}

// eval evaluates the expression and decodes its value into out.
func (b *browser) eval(t *testing.T, expr string, out any) {
	t.Helper()
	raw, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]byte](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("evaluate %s: %v: %s", expr, err, raw)
	}
}

// checkClean fails the test on a dialog, an uncaught exception or a CSP
// violation seen so far.
func (b *browser) checkClean(t *testing.T) {
	t.Helper()
	var csp []string
	b.eval(t, `window.__csp || []`, &csp)
	if len(csp) > 0 {
		t.Errorf("CSP violations: %v", csp)
	}
	if n := b.dialogs.Load(); n > 0 {
		t.Errorf("%d dialogs opened", n)
	}
	if n := b.exceptions.Load(); n > 0 {
		t.Errorf("%d uncaught exceptions in the page", n)
	}
}

// screenshot saves the full page as a PNG under the test's temporary
// directory and, when CORREX_SCREENSHOT_DIR is set, there too.
func (b *browser) screenshot(t *testing.T, name string) {
	t.Helper()
	buf, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if !bytes.HasPrefix(buf, []byte("\x89PNG")) {
		t.Fatalf("screenshot %s is not a PNG", name)
	}
	dirs := []string{t.TempDir()}
	if d := os.Getenv("CORREX_SCREENSHOT_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		p := filepath.Join(d, name+".png")
		if err := os.WriteFile(p, buf, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot: %s", p)
	}
}

func countsJS() string {
	return `Object.fromEntries(Array.from(document.querySelectorAll('#counts [data-count]')).map((b) => [b.dataset.count, Number(b.querySelector('.n').textContent)]))`
}

func wantCountsExpr(want map[string]int) string {
	var conds []string
	for k, v := range want {
		conds = append(conds, fmt.Sprintf(`c[%q] === %d`, k, v))
	}
	return `(() => { const c = ` + countsJS() + `; return ` + strings.Join(conds, " && ") + `; })()`
}

// TestBoard loads the board without a token (authentication off, as in
// devstack): the counts per state, the sessions waiting longest in order,
// the list and its filters; then a session changes state and the counts
// follow without a reload.
func TestBoard(t *testing.T) {
	chromiumPath(t)
	st := startStack(t, nil)
	send(t, st, "", "", workload()...)
	b := newBrowser(t, 1280, 800)
	b.do(t, "open the board", chromedp.Navigate(st.QueryURL+"/ui/"))
	b.waitJS(t, "the counts", wantCountsExpr(wantCounts))
	b.waitJS(t, "the waiting list", `document.querySelectorAll('#waiting tbody tr[data-session]').length === 4`)
	var waiting []string
	b.eval(t, `Array.from(document.querySelectorAll('#waiting tbody tr[data-session]')).map((r) => r.dataset.session)`, &waiting)
	if got, want := strings.Join(waiting, " "), "acme:wait-old acme:paused acme:cancelling acme:wait-new"; got != want {
		t.Errorf("waiting longest first: %s, want %s", got, want)
	}
	b.waitJS(t, "the list", `document.querySelectorAll('#list tbody tr[data-session]').length === 8`)
	checkListOrder(t, b, st)
	var legend int
	b.eval(t, `document.querySelectorAll('#legend [data-state]').length`, &legend)
	if legend != 10 {
		t.Errorf("legend shows %d states, want 10", legend)
	}
	b.screenshot(t, "console-board")

	// Filter by state (pressing a count) and by id prefix (the form).
	b.do(t, "filter PAUSED", chromedp.Click(chromedp.CSS(`#counts [data-count="PAUSED"]`)))
	b.waitJS(t, "only PAUSED listed", `(() => { const r = Array.from(document.querySelectorAll('#list tbody tr[data-session]')); return r.length === 1 && r[0].dataset.session === 'acme:paused'; })()`)
	b.do(t, "filter by prefix",
		chromedp.SetValue(chromedp.ID(`#filter-state`), ""),
		chromedp.SendKeys(chromedp.ID(`#filter-prefix`), "acme:wait"),
		chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)))
	b.waitJS(t, "prefix acme:wait listed", `(() => { const r = Array.from(document.querySelectorAll('#list tbody tr[data-session]')).map((x) => x.dataset.session).sort().join(' '); return r === 'acme:wait-new acme:wait-old'; })()`)
	var search string
	b.eval(t, `location.search`, &search)
	if search != "?prefix=acme%3Await" {
		t.Errorf("the filter is not kept in the address: %q", search)
	}

	// A session leaves AWAITING_APPROVAL: the board follows by itself.
	send(t, st, "", "", ev{id: "acme:wait-old", typ: "ApprovalGranted", at: 70})
	want := map[string]int{}
	for k, v := range wantCounts {
		want[k] = v
	}
	want["AWAITING_APPROVAL"], want["ACTIVE"] = 1, 2
	b.waitJS(t, "the counts after a transition", wantCountsExpr(want))
	// The waiting list follows the prefix filter (acme:wait) and the change.
	b.waitJS(t, "the waiting list after a transition", `Array.from(document.querySelectorAll('#waiting tbody tr[data-session]')).map((r) => r.dataset.session).join(' ') === 'acme:wait-new'`)

	// Filter by labels (all must hold), kept in the address.
	var cleared string
	b.eval(t, `document.getElementById('filter-prefix').value = ''`, &cleared)
	b.do(t, "filter by labels",
		chromedp.SendKeys(chromedp.ID(`#filter-labels`), "team=core"),
		chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)))
	b.waitJS(t, "label team=core listed", `(() => { const r = Array.from(document.querySelectorAll('#list tbody tr[data-session]')).map((x) => x.dataset.session).sort().join(' '); return r === 'acme:done acme:paused'; })()`)
	b.do(t, "filter by two labels",
		chromedp.SendKeys(chromedp.ID(`#filter-labels`), " env=prod"),
		chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)))
	b.waitJS(t, "labels team=core and env=prod listed", `(() => { const r = Array.from(document.querySelectorAll('#list tbody tr[data-session]')).map((x) => x.dataset.session).join(' '); return r === 'acme:paused'; })()`)
	b.eval(t, `location.search`, &search)
	if search != "?label=team%3Dcore&label=env%3Dprod" {
		t.Errorf("the label filter is not kept in the address: %q", search)
	}

	// At 390 px wide the board does not scroll sideways.
	b.do(t, "narrow", chromedp.EmulateViewport(390, 800), chromedp.Reload())
	b.waitJS(t, "the narrow board", wantCountsExpr(want))
	var scrollW int
	b.eval(t, `document.documentElement.scrollWidth`, &scrollW)
	if scrollW > 390 {
		t.Errorf("at 390 px the board is %d px wide", scrollW)
	}
	b.screenshot(t, "console-board-narrow")
	b.checkClean(t)
}

// TestStatsNarrow: at 390 px wide the board's rates, lag by partition and
// verifier's badge wrap inside the screen: the page does not scroll
// sideways, no element of those rows ends past the viewport's right edge,
// and no text in them breaks across lines (groups wrap as wholes).
func TestStatsNarrow(t *testing.T) {
	chromiumPath(t)
	st := startStack(t, nil)
	send(t, st, "", "", workload()...)
	b := newBrowser(t, 390, 800)
	b.do(t, "open the board", chromedp.Navigate(st.QueryURL+"/ui/"))
	// Every part of the rows drawn: the lag (an admin's, as every caller's
	// with authentication off), each partition's, the verifier's badge.
	b.waitJS(t, "the rows filled", `/^\d+ behind$/.test(document.getElementById('lag-now').textContent) &&
		document.querySelectorAll('#lag-parts .lag-part').length === 3 && !document.getElementById('verify-badge').hidden`)
	var got struct {
		Inner  float64  `json:"inner"`
		Scroll float64  `json:"scroll"`
		Past   []string `json:"past"`
		Broken []string `json:"broken"`
	}
	b.eval(t, `(() => { const inner = window.innerWidth, past = [], broken = [];
		const rows = Array.from(document.querySelectorAll('#rates, #lag-parts, #verify-badge'));
		for (const row of rows) for (const e of [row, ...row.querySelectorAll('*')]) {
			const r = e.getBoundingClientRect();
			if (r.width > 0 && (r.right > inner + 0.5 || r.left < -0.5)) past.push((e.id || e.className.baseVal || e.className || e.tagName) + ' ' + Math.round(r.left) + '..' + Math.round(r.right));
		}
		for (const row of rows.slice(0, 2)) {
			const w = document.createTreeWalker(row, NodeFilter.SHOW_TEXT);
			for (let n = w.nextNode(); n; n = w.nextNode()) {
				const rg = document.createRange(); rg.selectNodeContents(n);
				if (new Set(Array.from(rg.getClientRects()).map((x) => Math.round(x.top))).size > 1) broken.push(n.textContent);
			}
		}
		return {inner, scroll: document.documentElement.scrollWidth, past, broken}; })()`, &got)
	if got.Scroll > got.Inner {
		t.Errorf("at 390 px the board is %.0f px wide (viewport %.0f)", got.Scroll, got.Inner)
	}
	if len(got.Past) > 0 {
		t.Errorf("past the viewport's %.0f px: %q", got.Inner, got.Past)
	}
	if len(got.Broken) > 0 {
		t.Errorf("texts broken across lines: %q", got.Broken)
	}
	b.screenshot(t, "console-board-stats-390")
	b.checkClean(t)
}

// checkListOrder holds the rows of "All sessions" to the order an operator
// expects, most recently updated first, with each session's updatedAt read
// from the API (to the millisecond, as the page compares them).
func checkListOrder(t *testing.T, b *browser, st *devstack.Stack) {
	t.Helper()
	status, body := call(t, http.MethodGet, st.QueryURL+"/v1/sessions?limit=1000", "", nil)
	var page struct {
		Sessions []struct {
			SessionID string    `json:"sessionId"`
			UpdatedAt time.Time `json:"updatedAt"`
		} `json:"sessions"`
	}
	if err := json.Unmarshal(body, &page); err != nil || status != http.StatusOK {
		t.Fatalf("list: %d %v %s", status, err, body)
	}
	updated := map[string]time.Time{}
	for _, s := range page.Sessions {
		updated[s.SessionID] = s.UpdatedAt.Truncate(time.Millisecond)
	}
	var rows []string
	b.eval(t, `Array.from(document.querySelectorAll('#list tbody tr[data-session]')).map((r) => r.dataset.session)`, &rows)
	for i, id := range rows {
		if _, ok := updated[id]; !ok {
			t.Errorf("row %d: %s is not in the API's listing", i, id)
		} else if i > 0 && updated[id].After(updated[rows[i-1]]) {
			t.Errorf("row %d: %s (updated %s) after %s (updated %s): want most recently updated first; rows %v",
				i, id, updated[id].Format(time.RFC3339Nano), rows[i-1], updated[rows[i-1]].Format(time.RFC3339Nano), rows)
		}
	}
}

// TestSessionPage opens the timeline session: one bar per closed interval,
// widths in the ratio of the intervals' durations (and of durationsMs per
// state), the rejection with its reason, the verification against the
// log, and a live update when the session moves on.
func TestSessionPage(t *testing.T) {
	chromiumPath(t)
	st := startStack(t, nil)
	send(t, st, "", "", workload()...)
	b := newBrowser(t, 1280, 800)
	b.do(t, "open the session", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:timeline"))
	b.waitJS(t, "the timeline", `document.querySelectorAll('#timeline .bar.closed').length === 5`)
	checkBars(t, b, wantIntervals)

	// The widths per state against the API's durationsMs.
	status, body := call(t, http.MethodGet, st.QueryURL+"/v1/sessions/acme:timeline", "", nil)
	var snap struct {
		DurationsMs map[string]float64 `json:"durationsMs"`
	}
	if err := json.Unmarshal(body, &snap); err != nil || status != 200 {
		t.Fatalf("session: %d %s", status, body)
	}
	var perState map[string]float64
	b.eval(t, `(() => { const m = {}; for (const b of document.querySelectorAll('#timeline .bar.closed')) m[b.dataset.state] = (m[b.dataset.state] || 0) + b.getBoundingClientRect().width; return m; })()`, &perState)
	var wSum, dSum float64
	for s, w := range perState {
		wSum += w
		dSum += snap.DurationsMs[s]
	}
	for s, d := range snap.DurationsMs {
		if got, want := perState[s]/wSum, d/dSum; math.Abs(got-want) > 0.01 {
			t.Errorf("%s takes %.3f of the closed bars, durationsMs says %.3f", s, got, want)
		}
	}

	var open string
	b.eval(t, `Array.from(document.querySelectorAll('#timeline .bar.open')).map((b) => b.dataset.state).join(',')`, &open)
	if open != "ACTIVE" {
		t.Errorf("open bar %q, want ACTIVE", open)
	}
	var text string
	b.eval(t, `document.querySelector('#rejections tbody').innerText`, &text)
	if !strings.Contains(text, "SessionResumed") || !strings.Contains(text, "invalid_transition") {
		t.Errorf("rejections: %q", text)
	}
	b.eval(t, `document.querySelector('#counters').innerText`, &text)
	if !strings.Contains(text, "toolCalls\n1") && !strings.Contains(text, "toolCalls\t1") {
		t.Errorf("counters: %q", text)
	}

	b.do(t, "verify", chromedp.Click(chromedp.ID(`#verify`)))
	b.waitJS(t, "the verification", `document.querySelector('#verify-result').textContent.startsWith('matches the stored snapshot')`)
	b.screenshot(t, "console-session")

	// The page polls with If-None-Match and redraws when the session moves.
	send(t, st, "", "", ev{id: "acme:timeline", typ: "SessionPaused", at: 25}) // ACTIVE 7 s
	b.waitJS(t, "the live update", `document.querySelectorAll('#timeline .bar.closed').length === 6`)
	checkBars(t, b, append(wantIntervals[:5:5], struct {
		state string
		ms    float64
	}{"ACTIVE", 7000}))
	b.eval(t, `Array.from(document.querySelectorAll('#timeline .bar.open')).map((b) => b.dataset.state).join(',')`, &open)
	if open != "PAUSED" {
		t.Errorf("open bar after the pause %q, want PAUSED", open)
	}

	// At 390 px wide the page does not scroll sideways.
	b.do(t, "narrow", chromedp.EmulateViewport(390, 800), chromedp.Reload())
	b.waitJS(t, "the narrow timeline", `document.querySelectorAll('#timeline .bar.closed').length === 6`)
	var scrollW int
	b.eval(t, `document.documentElement.scrollWidth`, &scrollW)
	if scrollW > 390 {
		t.Errorf("at 390 px the page is %d px wide", scrollW)
	}
	b.screenshot(t, "console-session-narrow")

	// The rules an operator acts on: the pending request and the last
	// decisions, the execution time, the whole history in pages, and a
	// structured failure.
	b.do(t, "wide", chromedp.EmulateViewport(1280, 800))
	rules := []ev{{typ: "SessionCreated", at: 0}, {typ: "SessionStarted", at: 1}, // CREATED 1 s
		{typ: "ApprovalRequested", at: 4, payload: map[string]any{"requestId": "req-a", "reason": "spend 5 EUR"}}, // ACTIVE 3 s
		{typ: "ApprovalGranted", at: 6, payload: map[string]any{"requestId": "req-a", "by": "bob", "reason": "within budget"}}}
	for k := range 28 { // ACTIVE 1 s before each pause
		rules = append(rules, ev{typ: "SessionPaused", at: float64(7 + 2*k)}, ev{typ: "SessionResumed", at: float64(8 + 2*k)})
	}
	rules = append(rules, ev{typ: "ApprovalRequested", at: 63, payload: map[string]any{"requestId": "req-b", "reason": "spend 9 EUR"}})
	for i := range rules {
		rules[i].id = "acme:rules"
	}
	send(t, st, "", "", append(rules, ev{id: "acme:failed", typ: "SessionCreated", at: 0}, ev{id: "acme:failed", typ: "SessionFailed", at: 1,
		payload: map[string]any{"reason": "provider answered 429", "category": "provider", "code": "rate_limited", "retryable": true}})...)
	b.do(t, "open the approvals", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:rules"))
	b.waitJS(t, "the pending request", `document.querySelector('#approval-pending [data-request="req-b"]') !== null`)
	b.eval(t, `[document.querySelector('#approval-pending').innerText, document.querySelector('#decisions tbody').innerText,
		document.querySelector('#s-execution').innerText].join('|')`, &text)
	for _, want := range []string{"spend 9 EUR", "req-a\tgranted\tbob\twithin budget\t2.00 s", "|33.0 s"} {
		if !strings.Contains(text, want) {
			t.Errorf("approvals and execution time: %q, want %q in it", text, want)
		}
	}
	b.do(t, "read the history", chromedp.Click(chromedp.ID(`#history-load`)))
	b.waitJS(t, "the first page", `document.querySelector('#history tbody').rows.length === 50 && !document.querySelector('#history-more').hidden`)
	b.do(t, "read more", chromedp.Click(chromedp.ID(`#history-more`)))
	b.waitJS(t, "the whole history", `document.querySelector('#history tbody').rows.length === 61 && document.querySelector('#history-more').hidden`)
	b.eval(t, `document.querySelector('#history tbody').rows[60].innerText`, &text)
	if !strings.Contains(text, "ApprovalRequested\tapplied") {
		t.Errorf("the history's last row: %q", text)
	}
	// A click on an event shows the session as it was right after it: the
	// third, req-a's request, left it waiting for that approval.
	b.do(t, "as of the third event", chromedp.Click(chromedp.CSS(`#history tbody tr:nth-child(3) button.asof`)))
	b.waitJS(t, "the session as of version 3", `!document.querySelector('#asof').hidden && document.querySelector('#asof-facts').innerText.includes('AWAITING')`)
	b.eval(t, `[document.querySelector('#asof-title').innerText, document.querySelector('#asof-facts').innerText].join('|')`, &text)
	for _, want := range []string{"As it was at version 3 (after ApprovalRequested)", "req-a · spend 5 EUR", "version\n3", "events seen\n3"} {
		if !strings.Contains(text, want) {
			t.Errorf("as of version 3: %q, want %q in it", text, want)
		}
	}
	b.screenshot(t, "console-session-asof")
	b.do(t, "back to now", chromedp.Click(chromedp.CSS(`#asof-close`)))
	b.waitJS(t, "the past state closed", `document.querySelector('#asof').hidden`)
	b.do(t, "open the failure", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:failed"))
	b.waitJS(t, "the failure", `document.querySelector('#failure-category') !== null`)
	b.eval(t, `document.querySelector('#s-failure').innerText`, &text)
	if want := "Failed: category provider, code rate_limited, retryable: provider answered 429"; !strings.Contains(text, want) {
		t.Errorf("failure: %q, want %q", text, want)
	}
	b.checkClean(t)
}

// checkBars compares the closed bars, in order, with the intervals: the
// states, and each bar's share of the drawn width against its share of
// the time.
func checkBars(t *testing.T, b *browser, want []struct {
	state string
	ms    float64
}) {
	t.Helper()
	var bars []struct {
		State string  `json:"state"`
		Width float64 `json:"width"`
	}
	b.eval(t, `Array.from(document.querySelectorAll('#timeline .bar.closed')).map((b) => ({state: b.dataset.state, width: b.getBoundingClientRect().width}))`, &bars)
	if len(bars) != len(want) {
		t.Fatalf("%d bars, want %d: %+v", len(bars), len(want), bars)
	}
	var wSum, dSum float64
	for i := range bars {
		wSum += bars[i].Width
		dSum += want[i].ms
	}
	for i, bar := range bars {
		if bar.State != want[i].state {
			t.Errorf("bar %d is %s, want %s", i, bar.State, want[i].state)
		}
		if got, exp := bar.Width/wSum, want[i].ms/dSum; math.Abs(got-exp) > 0.01 {
			t.Errorf("bar %d (%s) is %.3f of the closed width (%.1f px), want %.3f", i, bar.State, got, bar.Width, exp)
		}
	}
}

// TestTimelineInstants opens sessions whose intervals last 0 ms: each such
// bar is a thin mark, a long interval beside them keeps nearly the whole
// row, the open state takes the rest when every closed interval is an
// instant, and the bars never add up to more than the row; at 1280 and at
// 390 px wide.
func TestTimelineInstants(t *testing.T) {
	chromiumPath(t)
	st := startStack(t, nil)
	send(t, st, "", "",
		// CREATED 0 ms, ACTIVE 0 ms, then PAUSED, open.
		ev{id: "acme:instants", typ: "SessionCreated", at: 0}, ev{id: "acme:instants", typ: "SessionStarted", at: 0},
		ev{id: "acme:instants", typ: "SessionPaused", at: 0},
		// CREATED 0 ms, ACTIVE 0 ms, PAUSED 10 min, ACTIVE 0 ms, COMPLETED.
		ev{id: "acme:long", typ: "SessionCreated", at: 0}, ev{id: "acme:long", typ: "SessionStarted", at: 0},
		ev{id: "acme:long", typ: "SessionPaused", at: 0}, ev{id: "acme:long", typ: "SessionResumed", at: 600},
		ev{id: "acme:long", typ: "SessionCompleted", at: 600})
	type bar struct {
		State string  `json:"state"`
		Ms    float64 `json:"ms"`
		Open  bool    `json:"open"`
		Width float64 `json:"width"`
	}
	var row struct {
		Width float64 `json:"width"`
		Bars  []bar   `json:"bars"`
	}
	const rowJS = `({width: document.getElementById('timeline').clientWidth,
		bars: Array.from(document.querySelectorAll('#timeline .bar')).map((b) => ({state: b.dataset.state,
			ms: Number(b.dataset.ms || -1), open: b.classList.contains('open'), width: b.getBoundingClientRect().width}))})`
	// check reads the row and holds it to the rules: instants at most
	// maxMark px wide, the widest bar (the long interval, or the open
	// state) at least most of the row, the sum within the row.
	const maxMark = 4
	b := newBrowser(t, 1280, 800)
	check := func(what string, bars int, most float64) {
		t.Helper()
		b.eval(t, rowJS, &row)
		if len(row.Bars) != bars {
			t.Fatalf("%s: %d bars, want %d: %+v", what, len(row.Bars), bars, row.Bars)
		}
		var sum, widest float64
		for i, bar := range row.Bars {
			sum += bar.Width
			widest = max(widest, bar.Width)
			if !bar.Open && bar.Ms == 0 && bar.Width > maxMark {
				t.Errorf("%s: bar %d (%s, 0 ms) is %.1f px wide, want at most %d", what, i, bar.State, bar.Width, maxMark)
			}
		}
		if widest < most*row.Width {
			t.Errorf("%s: the widest bar is %.1f px of a %.1f px row, want at least %.0f%%: %+v", what, widest, row.Width, most*100, row.Bars)
		}
		if sum > row.Width+0.5 {
			t.Errorf("%s: the bars add up to %.1f px in a %.1f px row", what, sum, row.Width)
		}
	}
	for _, width := range []int{1280, 390} {
		b.do(t, "resize", chromedp.EmulateViewport(int64(width), 800))
		b.do(t, "open acme:instants", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:instants"))
		b.waitJS(t, "its timeline", `document.querySelectorAll('#timeline .bar.closed').length === 2 && document.querySelector('#timeline .bar.open') !== null`)
		check(fmt.Sprintf("acme:instants at %d px", width), 3, 0.9)
		b.screenshot(t, fmt.Sprintf("console-timeline-instants-%d", width))
		b.do(t, "open acme:long", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:long"))
		b.waitJS(t, "its timeline", `document.querySelectorAll('#timeline .bar.closed').length === 4`)
		check(fmt.Sprintf("acme:long at %d px", width), 4, 0.9)
		b.screenshot(t, fmt.Sprintf("console-timeline-long-%d", width))
	}
	b.checkClean(t)
}

// TestSessionDetails: the cancellation, recovery and failure block shows
// times as the other sections do, never a raw timestamp of many digits,
// and does not repeat the approval member, which the Approvals section
// shows whole (the pending request, the decisions, the total wait).
func TestSessionDetails(t *testing.T) {
	chromiumPath(t)
	st := startStack(t, nil)
	// Times with nanoseconds, as producers send them.
	send(t, st, "", "",
		ev{id: "acme:asked", typ: "SessionCreated", at: 0}, ev{id: "acme:asked", typ: "SessionStarted", at: 1},
		ev{id: "acme:asked", typ: "ApprovalRequested", at: 2.123456789, payload: map[string]any{"requestId": "req-a", "reason": "spend 5 EUR"}},
		ev{id: "acme:asked", typ: "ApprovalGranted", at: 3.987654321, payload: map[string]any{"requestId": "req-a", "by": "bob"}},
		ev{id: "acme:asked", typ: "ApprovalRequested", at: 4.000000007, payload: map[string]any{"requestId": "req-b", "reason": "spend 9 EUR"}},
		ev{id: "acme:stopping", typ: "SessionCreated", at: 0}, ev{id: "acme:stopping", typ: "SessionStarted", at: 1},
		ev{id: "acme:stopping", typ: "CancellationRequested", at: 2.123456789, payload: map[string]any{"reason": "operator"}})
	b := newBrowser(t, 1280, 800)
	// rawJS lists the texts in the block with a run of seven digits or
	// more: nanoseconds, whether a fraction of a second or a count.
	const rawJS = `(() => { const out = []; const w = document.createTreeWalker(document.getElementById('details'), NodeFilter.SHOW_TEXT);
		for (let n = w.nextNode(); n; n = w.nextNode()) if (/\d{7,}/.test(n.textContent)) out.push(n.textContent); return out; })()`
	var raw []string
	var text string

	b.do(t, "open acme:asked", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:asked"))
	b.waitJS(t, "the pending request", `document.querySelector('#approval-pending [data-request="req-b"]') !== null`)
	b.eval(t, rawJS, &raw)
	if len(raw) > 0 {
		t.Errorf("acme:asked: raw timestamps in the details: %q", raw)
	}
	b.eval(t, `document.getElementById('details').innerText`, &text)
	for _, repeated := range []string{"req-a", "req-b", "spend 9 EUR", "bob"} {
		if strings.Contains(text, repeated) {
			t.Errorf("acme:asked: the details repeat the approvals' %q:\n%s", repeated, text)
		}
	}
	b.eval(t, `document.getElementById('approvals').innerText`, &text)
	for _, want := range []string{"req-b", "spend 9 EUR", "req-a\tgranted\tbob", "Time waited for decisions, in all: 1.86 s"} {
		if !strings.Contains(text, want) {
			t.Errorf("acme:asked: the approvals section lacks %q:\n%s", want, text)
		}
	}
	b.screenshot(t, "console-session-details")

	b.do(t, "open acme:stopping", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:stopping"))
	b.waitJS(t, "the cancellation", `document.querySelector('#details [data-detail=cancellation] time') !== null`)
	b.eval(t, rawJS, &raw)
	if len(raw) > 0 {
		t.Errorf("acme:stopping: raw timestamps in the details: %q", raw)
	}
	b.eval(t, `document.querySelector('#details [data-detail=cancellation] time').textContent`, &text)
	if want := "2026-11-30 08:00:02.123 UTC"; text != want {
		t.Errorf("acme:stopping: requested at %q, want %q", text, want)
	}
	b.checkClean(t)
}

// TestHostileText checks that markup in a goal and in failure and
// cancellation reasons is shown as text: no dialog opens, no element is
// created from it, and the text is on the page verbatim.
func TestHostileText(t *testing.T) {
	chromiumPath(t)
	st := startStack(t, nil)
	send(t, st, "", "", workload()...)
	b := newBrowser(t, 1280, 800)
	for _, c := range []struct{ id, reason string }{{"acme:xss-fail", xssFail}, {"acme:xss-cancel", xssCancel}} {
		b.do(t, "open "+c.id, chromedp.Navigate(st.QueryURL+"/ui/sessions/"+c.id))
		b.waitJS(t, "the session", `!document.querySelector('#s-body').hidden`)
		var goal, details string
		b.eval(t, `document.querySelector('#s-goal').textContent`, &goal)
		b.eval(t, `document.querySelector('#details-body').textContent`, &details)
		if goal != xssGoal {
			t.Errorf("%s: goal shown as %q, want %q", c.id, goal, xssGoal)
		}
		if !strings.Contains(details, c.reason) {
			t.Errorf("%s: reason %q not shown verbatim in %q", c.id, c.reason, details)
		}
		var imgs, scripts int
		b.eval(t, `document.querySelectorAll('img').length`, &imgs)
		b.eval(t, `document.querySelectorAll('script:not(#fsm-states)').length`, &scripts) // the states are data, not a script
		if imgs != 0 || scripts != 1 {
			t.Errorf("%s: %d img and %d script elements on the page, want 0 and 1", c.id, imgs, scripts)
		}
		b.checkClean(t)
	}
	b.screenshot(t, "console-hostile-text")
	b.do(t, "open the board", chromedp.Navigate(st.QueryURL+"/ui/"))
	b.waitJS(t, "the list", `document.querySelectorAll('#list tbody tr[data-session]').length === 8`)
	var cells []string
	b.eval(t, `Array.from(document.querySelectorAll('#list td.goal-cell')).map((c) => c.textContent)`, &cells)
	found := 0
	for _, c := range cells {
		if c == xssGoal {
			found++
		}
	}
	if found != 2 {
		t.Errorf("the list shows the hostile goal verbatim %d times, want 2: %q", found, cells)
	}
	var imgs int
	b.eval(t, `document.querySelectorAll('img').length`, &imgs)
	if imgs != 0 {
		t.Errorf("%d img elements on the board", imgs)
	}
	b.checkClean(t)
}

// TestTenantIsolation runs with authentication on: a token bound to acme:
// sees acme's counts, list and sessions, never beta's, not even at
// beta's session URL; the token is kept in sessionStorage, not in the
// address or a cookie; without the admin scope the verify button goes away.
func TestTenantIsolation(t *testing.T) {
	chromiumPath(t)
	f := securitytest.Write(t)
	st := startStack(t, &auth.Config{TokensFile: f.Env["CORREX_AUTH_TOKENS_FILE"]})
	acme, writer := f.Tokens["acme"], f.Tokens["writer"]
	send(t, st, acme, acme,
		ev{id: "acme:one", typ: "SessionCreated", at: 0, payload: map[string]any{"goal": "acme work"}},
		ev{id: "acme:one", typ: "SessionStarted", at: 1},
		ev{id: "acme:two", typ: "SessionCreated", at: 0})
	const secret = "beta-confidential-goal"
	send(t, st, writer, f.Tokens["reader"],
		ev{id: "beta:secret", typ: "SessionCreated", at: 0, payload: map[string]any{"goal": secret}},
		ev{id: "beta:secret", typ: "SessionStarted", at: 1},
		ev{id: "beta:secret", typ: "ApprovalRequested", at: 2},
		ev{id: "beta:other", typ: "SessionCreated", at: 0, payload: map[string]any{"goal": secret}},
		ev{id: "beta:other", typ: "SessionStarted", at: 1},
		ev{id: "beta:other", typ: "SessionPaused", at: 2})

	b := newBrowser(t, 1280, 800)
	b.do(t, "open the board", chromedp.Navigate(st.QueryURL+"/ui/"))
	b.waitJS(t, "the request for a token", `!document.querySelector('#alert').hidden && document.querySelector('#alert').textContent.includes('token')`)
	b.do(t, "enter the token",
		chromedp.SendKeys(chromedp.ID(`#token-input`), acme),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	b.waitJS(t, "acme's counts", wantCountsExpr(map[string]int{"TOTAL": 2, "CREATED": 1, "ACTIVE": 1, "AWAITING_APPROVAL": 0, "PAUSED": 0}))
	b.waitJS(t, "acme's list", `document.querySelectorAll('#list tbody tr[data-session]').length === 2`)
	b.waitJS(t, "the empty waiting list", `document.querySelector('#waiting tbody').textContent.includes('No session is waiting')`)
	var text string
	b.eval(t, `document.body.innerText`, &text)
	if strings.Contains(text, "beta") || strings.Contains(text, secret) {
		t.Errorf("acme's board shows beta:\n%s", text)
	}
	// A prefix outside the tenant lists nothing.
	b.do(t, "filter beta:", chromedp.SendKeys(chromedp.ID(`#filter-prefix`), "beta:"),
		chromedp.Click(chromedp.CSS(`#filters button[type=submit]`)))
	b.waitJS(t, "nothing listed", `document.querySelector('#list tbody').textContent.includes('No session matches')`)
	b.screenshot(t, "console-tenant-board")

	var stored, cookie, href string
	b.eval(t, `sessionStorage.getItem('correx.console.token')`, &stored)
	b.eval(t, `document.cookie`, &cookie)
	b.eval(t, `location.href`, &href)
	if stored != acme || cookie != "" || strings.Contains(href, acme) {
		t.Errorf("token kept as %q, cookie %q, address %q", stored, cookie, href)
	}

	// beta's session URL answers like a session that does not exist.
	b.do(t, "open beta's session", chromedp.Navigate(st.QueryURL+"/ui/sessions/beta:secret"))
	b.waitJS(t, "not found", `document.querySelector('#s-message').textContent.startsWith('No such session')`)
	b.eval(t, `document.body.innerText`, &text)
	if strings.Contains(text, secret) || !strings.Contains(text, "No such session") {
		t.Errorf("beta's session page shows:\n%s", text)
	}
	b.screenshot(t, "console-tenant-other-session")

	// Its own session shows; verifying needs admin, so the button goes.
	b.do(t, "open acme's session", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:one"))
	b.waitJS(t, "the session", `!document.querySelector('#s-body').hidden`)
	b.do(t, "verify", chromedp.Click(chromedp.ID(`#verify`)))
	b.waitJS(t, "the button hidden", `document.querySelector('#verify').hidden && document.querySelector('#verify-result').textContent.includes('admin')`)
	b.checkClean(t)
}
