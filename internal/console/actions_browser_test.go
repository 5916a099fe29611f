package console_test

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/correx/sessions/internal/auth"
	"github.com/correx/sessions/internal/securitytest"
)

// stateIs is true when the session page shows the state, and the page was
// not reloaded since window.__kept was set.
func stateIs(state string) string {
	return `window.__kept === 1 && document.querySelector('#s-state [data-state]') && document.querySelector('#s-state [data-state]').dataset.state === '` + state + `'`
}

// TestActions runs with authentication on. With acme's token the session
// page approves (naming the pending request), pauses, denies and cancels,
// and each result arrives through the watch stream without a reload; a
// refused action is shown in words; the children follow their parent's
// cancel live; the next deadline counts down; the replacement chain is
// links. A token without events:write, and another tenant's session, show
// no action button.
func TestActions(t *testing.T) {
	chromiumPath(t)
	f := securitytest.Write(t)
	st := startStack(t, &auth.Config{TokensFile: f.Env["CORREX_AUTH_TOKENS_FILE"]})
	acme := f.Tokens["acme"]
	// The events happen now (seconds after t0), so that a deadline is in
	// the future.
	now := time.Since(t0).Seconds()
	send(t, st, acme, acme,
		ev{id: "acme:ask", typ: "SessionCreated", at: now, payload: map[string]any{"goal": "spend money"}},
		ev{id: "acme:ask", typ: "SessionStarted", at: now},
		ev{id: "acme:ask", typ: "ApprovalRequested", at: now, payload: map[string]any{"requestId": "req-1", "reason": "spend 5 EUR"}},
		ev{id: "acme:deny", typ: "SessionCreated", at: now},
		ev{id: "acme:deny", typ: "SessionStarted", at: now},
		ev{id: "acme:deny", typ: "ApprovalRequested", at: now},
		ev{id: "acme:run", typ: "SessionCreated", at: now, payload: map[string]any{"goal": "orchestrate", "timeouts": map[string]string{"execution": "2h"}}},
		ev{id: "acme:run", typ: "SessionStarted", at: now},
		ev{id: "acme:run-child", typ: "SessionCreated", at: now, payload: map[string]any{"parentSessionId": "acme:run"}},
		ev{id: "acme:run-child", typ: "SessionStarted", at: now},
		ev{id: "acme:old", typ: "SessionCreated", at: now},
		ev{id: "acme:old", typ: "SessionFailed", at: now, payload: map[string]any{"reason": "node lost", "category": "infrastructure"}},
		ev{id: "acme:new", typ: "SessionCreated", at: now, payload: map[string]any{"predecessorSessionId": "acme:old"}})
	send(t, st, f.Tokens["writer"], f.Tokens["reader"],
		ev{id: "beta:ask", typ: "SessionCreated", at: now}, ev{id: "beta:ask", typ: "SessionStarted", at: now},
		ev{id: "beta:ask", typ: "ApprovalRequested", at: now})

	b := newBrowser(t, 1280, 900)
	b.do(t, "open the board", chromedp.Navigate(st.QueryURL+"/ui/"))
	b.do(t, "enter the token", chromedp.SendKeys(chromedp.ID(`#token-input`), acme),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	b.waitJS(t, "the board follows the stream", `document.querySelector('#board-view').dataset.live === 'live'`)

	// Approve the pending request.
	b.do(t, "open acme:ask", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:ask"))
	b.waitJS(t, "the approve button", `!document.querySelector('#actions').hidden && !document.querySelector('[data-action=approve]').hidden && document.querySelector('#session-view').dataset.live === 'live'`)
	// The request's id and reason, when the snapshot has them
	// (approval.pending, docs/lifecycle.md, "Approvals that match their
	// request"); the time it waits since in any case.
	var pending string
	var shaped bool
	b.eval(t, `document.querySelector('#pending').textContent`, &pending)
	if _, body := call(t, http.MethodGet, st.QueryURL+"/v1/sessions/acme:ask", acme, nil); bytes.Contains(body, []byte(`"pending":{`)) {
		shaped = true
	}
	if !strings.Contains(pending, "since") || shaped && (!strings.Contains(pending, "spend 5 EUR") || !strings.Contains(pending, "req-1")) {
		t.Errorf("pending approval shown as %q", pending)
	}
	b.screenshot(t, "console-actions")
	var kept int
	b.eval(t, `window.__kept = 1`, &kept)
	b.do(t, "approve", chromedp.SendKeys(chromedp.ID(`#action-reason`), "within budget"),
		chromedp.Click(chromedp.CSS(`[data-action=approve]`)))
	b.waitJS(t, "ACTIVE through the stream", stateIs("ACTIVE"))
	var text string
	b.eval(t, `document.querySelector('#decisions tbody').innerText + ' ' + document.querySelector('#counters').textContent`, &text)
	if !strings.Contains(text, "req-1\tgranted") || (!strings.Contains(text, "approvalsGranted1") && !strings.Contains(text, "approvalsGranted 1")) {
		t.Errorf("after approving: %q", text)
	}
	// Pause, now that it is ACTIVE; approve is gone.
	b.waitJS(t, "the pause button", `!document.querySelector('[data-action=pause]').hidden && document.querySelector('[data-action=approve]').hidden`)
	b.do(t, "pause", chromedp.Click(chromedp.CSS(`[data-action=pause]`)))
	b.waitJS(t, "PAUSED through the stream", stateIs("PAUSED"))

	// A refused action is said in words: a reason over 1 KiB.
	b.eval(t, `document.getElementById('action-reason').value = 'é'.repeat(600), 1`, &kept)
	b.do(t, "cancel with a long reason", chromedp.Click(chromedp.CSS(`[data-action=cancel]`)))
	b.waitJS(t, "the refusal in words", `document.querySelector('#action-result').textContent.includes('Refused') && document.querySelector('#action-result').textContent.includes('reason')`)
	b.screenshot(t, "console-action-refused")
	b.waitJS(t, "still PAUSED", stateIs("PAUSED"))

	// Deny.
	b.do(t, "open acme:deny", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:deny"))
	b.waitJS(t, "the deny button", `!document.querySelector('[data-action=deny]').hidden && document.querySelector('#session-view').dataset.live === 'live'`)
	b.eval(t, `window.__kept = 1`, &kept)
	b.do(t, "deny", chromedp.Click(chromedp.CSS(`[data-action=deny]`)))
	b.waitJS(t, "the denial through the stream", stateIs("ACTIVE")+` && /approvalsDenied\s*1/.test(document.querySelector('#counters').innerText)`)

	// The parent: its deadline counts down, its child is listed; cancelling
	// it cancels the child, and the children's table follows.
	b.do(t, "open acme:run", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:run"))
	b.waitJS(t, "the child listed", `(() => { const r = document.querySelector('#children tr[data-session="acme:run-child"]'); return r && r.dataset.state === 'ACTIVE'; })()`)
	b.waitJS(t, "the countdown", `/^in 1 h 5\d m$/.test(document.querySelector('#s-countdown').textContent)`)
	b.screenshot(t, "console-session-parent")
	b.eval(t, `window.__kept = 1`, &kept)
	b.do(t, "cancel", chromedp.Click(chromedp.CSS(`[data-action=cancel]`)))
	b.waitJS(t, "CANCELLING through the stream", stateIs("CANCELLING"))
	b.waitJS(t, "the child follows", `document.querySelector('#children tr[data-session="acme:run-child"]').dataset.state === 'CANCELLING'`)

	// The successor links to its predecessor.
	b.do(t, "open acme:new", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:new"))
	b.waitJS(t, "the chain", `!document.querySelector('#chain-box').hidden && document.querySelector('#chain [data-role=predecessor] a').getAttribute('href') === '/ui/sessions/acme%3Aold'`)
	b.screenshot(t, "console-chain")

	// Another tenant's session: not found, no action.
	b.do(t, "open beta:ask", chromedp.Navigate(st.QueryURL+"/ui/sessions/beta:ask"))
	b.waitJS(t, "not found", `document.querySelector('#s-message').textContent.startsWith('No such session')`)
	var buttons int
	b.eval(t, `Array.from(document.querySelectorAll('[data-action]')).filter((x) => x.offsetParent !== null).length`, &buttons)
	if buttons != 0 {
		t.Errorf("%d action buttons visible on another tenant's session", buttons)
	}
	b.eval(t, `document.body.innerText`, &text)
	if strings.Contains(text, "beta:ask ") || strings.Contains(text, "AWAITING") && strings.Contains(text, "Pending approval") {
		t.Errorf("beta's session shows:\n%s", text)
	}

	// A token that may only read sees the sessions, and no action.
	b.do(t, "use the reader's token", chromedp.SendKeys(chromedp.ID(`#token-input`), f.Tokens["reader"]),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	b.do(t, "open beta:ask as reader", chromedp.Navigate(st.QueryURL+"/ui/sessions/beta:ask"))
	b.waitJS(t, "the session", `!document.querySelector('#s-body').hidden && document.querySelector('#session-view').dataset.live === 'live'`)
	b.eval(t, `Array.from(document.querySelectorAll('[data-action]')).filter((x) => x.offsetParent !== null).length`, &buttons)
	if buttons != 0 {
		t.Errorf("%d action buttons visible to a token without events:write", buttons)
	}
	b.checkClean(t)
}

// TestForceCancelConfirm: Force cancel asks first, in the page (no
// dialog): the click alone sends nothing, "No" sends nothing, and only
// "Yes" sends the forced cancellation, which arrives through the stream.
func TestForceCancelConfirm(t *testing.T) {
	chromiumPath(t)
	f := securitytest.Write(t)
	st := startStack(t, &auth.Config{TokensFile: f.Env["CORREX_AUTH_TOKENS_FILE"]})
	acme := f.Tokens["acme"]
	now := time.Since(t0).Seconds()
	send(t, st, acme, acme, ev{id: "acme:force", typ: "SessionCreated", at: now}, ev{id: "acme:force", typ: "SessionStarted", at: now})

	b := newBrowser(t, 1280, 900)
	b.do(t, "open acme:force", chromedp.Navigate(st.QueryURL+"/ui/sessions/acme:force"))
	b.do(t, "enter the token", chromedp.SendKeys(chromedp.ID(`#token-input`), acme),
		chromedp.Click(chromedp.CSS(`#token-form button[type=submit]`)))
	b.waitJS(t, "the force cancel button", `!document.querySelector('#actions').hidden && !document.querySelector('[data-action=force-cancel]').hidden && document.querySelector('#session-view').dataset.live === 'live'`)
	// Count the POSTs the page makes from here on: the console calls the
	// global fetch at each request.
	var posts int
	b.eval(t, `window.__posts = []; { const f = window.fetch; window.fetch = function (u, o) { if (o && o.method === 'POST') window.__posts.push(String(u)); return f.apply(this, arguments); }; } 0`, &posts)

	b.do(t, "force cancel", chromedp.Click(chromedp.CSS(`[data-action=force-cancel]`)))
	b.eval(t, `window.__posts.length`, &posts)
	if posts != 0 {
		t.Fatalf("Force cancel alone sent %d requests, want none before a confirmation", posts)
	}
	b.waitJS(t, "the question", `!document.getElementById('force-confirm').hidden && document.getElementById('force-confirm').offsetParent !== null && document.activeElement.id === 'force-confirm-no'`)
	b.screenshot(t, "console-force-cancel-confirm")
	b.do(t, "no", chromedp.Click(chromedp.ID(`#force-confirm-no`)))
	b.waitJS(t, "the question gone", `document.getElementById('force-confirm').hidden && document.getElementById('force-confirm').offsetParent === null`)
	b.eval(t, `window.__posts.length`, &posts)
	if posts != 0 {
		t.Fatalf("Force cancel then No sent %d requests, want none", posts)
	}

	b.do(t, "force cancel again", chromedp.Click(chromedp.CSS(`[data-action=force-cancel]`)))
	b.waitJS(t, "the question again", `!document.getElementById('force-confirm').hidden`)
	b.do(t, "yes", chromedp.Click(chromedp.ID(`#force-confirm-yes`)))
	b.waitJS(t, "one action sent", `window.__posts.length === 1 && window.__posts[0].endsWith('/v1/sessions/acme%3Aforce/actions') && document.getElementById('action-result').textContent.includes('sent')`)
	b.waitJS(t, "the forced cancellation through the stream", `(() => { const c = document.querySelector('#details [data-detail=cancellation]'); return c !== null && /mode\s*forced/.test(c.innerText); })()`)
	status, body := call(t, http.MethodGet, st.QueryURL+"/v1/sessions/acme:force", acme, nil)
	if status != http.StatusOK || !bytes.Contains(body, []byte(`"mode":"forced"`)) {
		t.Errorf("after confirming: %d %s", status, body)
	}
	b.checkClean(t)
}

// TestTileLabels: at 1400 px the state tiles' labels break only after an
// underscore, never inside a word; each tile, and the rate of changes, has
// its sparkline.
func TestTileLabels(t *testing.T) {
	chromiumPath(t)
	st := startStack(t, nil)
	b := newBrowser(t, 1400, 900)
	b.do(t, "open the board", chromedp.Navigate(st.QueryURL+"/ui/"))
	b.waitJS(t, "the counts", `document.querySelectorAll('#counts .label').length === 11`)
	// Each text node of a label (one per word, split after underscores)
	// lies on one line.
	var broken []string
	b.eval(t, `(() => { const out = []; for (const l of document.querySelectorAll('#counts .label')) for (const n of l.childNodes) {
		if (n.nodeType !== 3) continue; const r = document.createRange(); r.selectNodeContents(n);
		const lines = new Set(Array.from(r.getClientRects()).map((x) => Math.round(x.top))); if (lines.size > 1) out.push(n.textContent); } return out; })()`, &broken)
	if len(broken) > 0 {
		t.Errorf("labels broken inside a word: %v", broken)
	}
	// The sparklines sample the counts and the stream's rate locally, and
	// the projector's lag from the stats.
	b.waitJS(t, "the sparklines", `Array.from(document.querySelectorAll('#counts .spark, #rates .spark')).filter((x) => Number(x.dataset.samples) >= 2 && x.querySelector('polyline').getAttribute('points').split(' ').length >= 2).length === 13`)
	b.waitJS(t, "the projector's lag", `/^\d+ behind$/.test(document.getElementById('lag-now').textContent)`)
	// And each partition's lag, in partition order, once each has two
	// samples (the stats are polled; the first poll may come after the
	// rate's second sample).
	b.waitJS(t, "the lag by partition", `(() => { const ps = Array.from(document.querySelectorAll('#lag-parts .lag-part'));
		return ps.length > 0 && ps.every((x) => Number(x.querySelector('.spark').dataset.samples) >= 2); })()`)
	var parts []int
	b.eval(t, `Array.from(document.querySelectorAll('#lag-parts .lag-part')).filter((x) => Number(x.querySelector('.spark').dataset.samples) >= 2).map((x) => Number(x.dataset.partition))`, &parts)
	if len(parts) == 0 || !slices.IsSorted(parts) || parts[0] != 0 || parts[len(parts)-1] != len(parts)-1 {
		t.Errorf("lag sparklines by partition: %v", parts)
	}
	// The background verifier's badge, from GET /v1/verify.
	b.waitJS(t, "the verifier's badge", `(() => { const v = document.getElementById('verify-badge');
		return !v.hidden && v.classList.contains('ok') && /^verified against the log: \d+ checked, 0 mismatches, 0 repaired/.test(v.textContent); })()`)
	b.screenshot(t, "console-board-1400")
	b.checkClean(t)
}
