// correx sessions console: plain JavaScript, no framework, no build step.
//
// Safety rules this file keeps:
// - every text that comes from the API (ids, goals, reasons, labels,
//   metadata) goes into the page through text nodes (textContent), never
//   through a property or call that parses HTML;
// - links to sessions are built as "/ui/sessions/" + encodeURIComponent(id);
// - the bearer token lives in sessionStorage (this tab only) and is sent
//   only in the Authorization header of same-origin fetch() calls, never in
//   a URL or a cookie.
//
// Live updates come from the query service's watch streams (Server-Sent
// Events read with fetch(), since EventSource cannot send the token): the
// page redraws when a change arrives and resumes a dropped stream with
// Last-Event-ID. Only while a stream cannot be opened does it poll, slowly
// (FALLBACK_MS). Actions (approve, deny, cancel, pause, resume) are POSTed
// to the query service, which forwards them to ingest with the same token.
'use strict';

(function () {
  // The lifecycle's states in order, written into the page from pkg/fsm
  // when the service starts (console.go).
  const STATES = JSON.parse(document.getElementById('fsm-states').textContent);
  const WAITING = ['AWAITING_APPROVAL', 'PAUSED', 'CANCELLING'];
  const TOKEN_KEY = 'correx.console.token';
  const FALLBACK_MS = 15000; // polling while a watch stream cannot be opened
  const COUNTS_DEBOUNCE_MS = 200; // coalesce redraws after a burst of changes
  const LIST_DEBOUNCE_MS = 700; // listings, which cost more
  const RETRY_MAX_MS = 15000; // longest wait before opening a stream again
  const CHILDREN_SHOWN = 50;
  const CHILDREN_PAGES = 5;
  const SPARK_EVERY_MS = 5000; // a sparkline sample, taken locally
  const SPARK_SAMPLES = 60; // five minutes of samples
  const WAITING_READ = 100; // sessions read per waiting state
  const WAITING_SHOWN = 15;
  const PAGE = 50;
  const OPEN_SHARE = 15; // percent of the timeline the open state takes, when a closed interval has a length
  // The snapshot's top-level members: KNOWN are shown in place, the others
  // generically under "Labels, metadata and links", EXTRAS_FIRST in its
  // order and any member a newer server adds after them. Every member the
  // server writes is in one of the two (TestSessionPageFields).
  const KNOWN = new Set(['sessionId', 'state', 'terminal', 'correlationId', 'goal', 'predecessorSessionId',
    'createdAt', 'updatedAt', 'stateEnteredAt', 'version', 'lastEventId', 'position', 'firstOffset',
    'counters', 'durationsMs', 'executionMs', 'transitions', 'rejections', 'approval', 'failure', 'cancellation',
    'recovery', 'digest']);
  const LINK_FIELDS = new Set(['parentSessionId', 'successorSessionId', 'predecessorSessionId']);
  const EXTRAS_FIRST = ['labels', 'metadata', 'parentSessionId', 'deadline', 'successorSessionId', 'replacement',
    'annotations', 'parentClosePolicy', 'timeouts'];

  const $ = (id) => document.getElementById(id);

  // el builds an element; string and number children become text nodes.
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') e.className = v;
      else if (k === 'text') e.textContent = String(v);
      else e.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      e.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
    }
    return e;
  }

  function clear(node) { node.replaceChildren(); }

  function sessionHref(id) { return '/ui/sessions/' + encodeURIComponent(id); }
  function sessionLink(id) { return el('a', { href: sessionHref(id), class: 'mono' }, id); }

  // stateLabel is a state's name that may break only after an underscore
  // (AWAITING_ APPROVAL), never inside a word.
  function stateLabel(state) {
    const span = el('span', { class: 'label' });
    String(state).split('_').forEach((part, i, all) => {
      span.append(document.createTextNode(part + (i < all.length - 1 ? '_' : '')));
      if (i < all.length - 1) span.append(document.createElement('wbr'));
    });
    return span;
  }

  function badge(state) {
    const known = STATES.includes(state);
    return el('span', { class: 'badge', 'data-state': known ? state : null },
      el('span', { class: 'swatch' + (known ? ' st-' + state : ''), 'aria-hidden': 'true' }), String(state));
  }

  // fmtMs: 850 ms, 12.3 s, 4 m 05 s, 2 h 10 m, 3 d 4 h.
  function fmtMs(ms) {
    if (!(ms >= 0)) return '–';
    if (ms < 1000) return Math.round(ms) + ' ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(s < 10 ? 2 : 1) + ' s';
    const m = Math.floor(s / 60);
    if (m < 60) return m + ' m ' + String(Math.floor(s % 60)).padStart(2, '0') + ' s';
    const h = Math.floor(m / 60);
    if (h < 48) return h + ' h ' + String(m % 60).padStart(2, '0') + ' m';
    return Math.floor(h / 24) + ' d ' + (h % 24) + ' h';
  }

  function ms(t) { const v = Date.parse(t); return Number.isNaN(v) ? NaN : v; }

  function fmtTime(t) {
    const v = ms(t);
    if (Number.isNaN(v)) return t ? String(t) : '–';
    return new Date(v).toISOString().replace('T', ' ').replace('Z', ' UTC');
  }

  function timeEl(t) { return el('time', { datetime: t || null, title: t || null }, fmtTime(t)); }

  // A time as the API writes it (RFC 3339 in UTC, up to nanoseconds):
  // value() shows one with timeEl whatever the member's name, so that no
  // block prints the raw nanoseconds.
  const RFC3339 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?(Z|[+-]\d{2}:\d{2})$/;

  // ---- token and fetch ----

  function token() { try { return sessionStorage.getItem(TOKEN_KEY) || ''; } catch (e) { return ''; } }

  function showTokenStatus() {
    $('token-status').textContent = token()
      ? 'token set (kept in this tab only)'
      : 'no token: works when the service runs without authentication';
  }

  function alertBox(msg) {
    const a = $('alert');
    if (!msg) { a.hidden = true; a.textContent = ''; return; }
    a.textContent = msg;
    a.hidden = false;
  }

  class APIError extends Error {
    constructor(status, detail) { super(detail || ('HTTP ' + status)); this.status = status; }
  }

  // api GETs a path of the query API. It answers {status, etag, body};
  // 304 has no body. Errors other than 304 throw APIError.
  async function api(path, etag) {
    const headers = { Accept: 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    if (etag) headers['If-None-Match'] = etag;
    let resp;
    try {
      resp = await fetch(path, { headers, cache: 'no-store', credentials: 'omit', redirect: 'error' });
    } catch (e) {
      throw new APIError(0, 'the query service does not answer; retrying');
    }
    if (resp.status === 304) return { status: 304, etag: etag, body: null };
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) {
      const detail = body && typeof body.detail === 'string' ? body.detail : '';
      if (resp.status === 401) {
        alertBox('The query service needs a valid token: enter it above. (' + detail + ')');
      } else if (resp.status === 429) {
        alertBox('Rate limited by the query service; slowing down.');
      }
      throw new APIError(resp.status, detail);
    }
    alertBox('');
    return { status: resp.status, etag: resp.headers.get('ETag'), body };
  }

  // describe turns a problem+json answer into one sentence: its detail
  // and the fields it names.
  function describe(status, body) {
    let msg = body && typeof body.detail === 'string' && body.detail ? body.detail : 'HTTP ' + status;
    if (body && Array.isArray(body.errors)) {
      const parts = body.errors.filter((e) => e && typeof e.field === 'string')
        .map((e) => e.field + ' ' + (typeof e.message === 'string' ? e.message : ''));
      const said = body.errors.every((e) => e && typeof e.message === 'string' && msg.includes(e.message));
      if (parts.length && !said) msg += ' (' + parts.join('; ') + ')';
    }
    return msg;
  }

  // post sends a JSON body to a path of the query API and answers
  // {status, body}; an answer other than 2xx throws APIError with the
  // problem's detail and fields in words.
  async function post(path, data) {
    const headers = { Accept: 'application/json', 'Content-Type': 'application/json' };
    const t = token();
    if (t) headers.Authorization = 'Bearer ' + t;
    let resp;
    try {
      resp = await fetch(path, { method: 'POST', headers, body: JSON.stringify(data), cache: 'no-store', credentials: 'omit', redirect: 'error' });
    } catch (e) {
      throw new APIError(0, 'the query service does not answer');
    }
    let body = null;
    try { body = await resp.json(); } catch (e) { body = null; }
    if (!resp.ok) throw new APIError(resp.status, describe(resp.status, body));
    return { status: resp.status, body };
  }

  // whoami is what the token may do: {name, scopes, prefix, anonymous,
  // actions}; null when unknown (no token yet, or the service is older).
  let me = null;
  async function loadWhoami() {
    try { me = (await api('/v1/whoami')).body; } catch (e) { me = null; }
    return me;
  }

  // mayWrite: the token may send events for the session, and the service
  // forwards actions. The buttons follow it; ingest decides in the end.
  function mayWrite(id) {
    if (!me || !me.actions || !Array.isArray(me.scopes)) return false;
    const scoped = me.scopes.includes('events:write') || me.scopes.includes('admin');
    return scoped && typeof id === 'string' && id.startsWith(me.prefix || '');
  }

  // watch follows a watch stream of the query service. handlers: event(name,
  // data) for each event with data, opened(resumed) when a stream starts,
  // state('live' | 'retrying' | 'fallback', detail), and fallback(), called
  // every FALLBACK_MS while no stream can be opened. It returns restart().
  function watch(path, handlers) {
    let lastId = null;
    let ctrl = null;
    let failures = 0;
    let fallbackTimer = 0;
    let generation = 0;
    function startFallback() {
      if (fallbackTimer) return;
      handlers.fallback();
      fallbackTimer = setInterval(() => { if (!document.hidden) handlers.fallback(); }, FALLBACK_MS);
    }
    function stopFallback() { clearInterval(fallbackTimer); fallbackTimer = 0; }
    async function connect(gen) {
      const headers = { Accept: 'text/event-stream' };
      const t = token();
      if (t) headers.Authorization = 'Bearer ' + t;
      if (lastId) headers['Last-Event-ID'] = lastId;
      ctrl = new AbortController();
      let resp;
      try {
        resp = await fetch(path, { headers, cache: 'no-store', credentials: 'omit', redirect: 'error', signal: ctrl.signal });
      } catch (e) {
        return retry(gen, 'the query service does not answer');
      }
      if (gen !== generation) return;
      if (resp.status === 410) { // the cursor is too old: start afresh
        lastId = null;
        return setTimeout(() => connect(gen), 100);
      }
      if (!resp.ok) {
        let body = null;
        try { body = await resp.json(); } catch (e) { body = null; }
        if (resp.status === 401) alertBox('The query service needs a valid token: enter it above. (' + describe(401, body) + ')');
        return retry(gen, describe(resp.status, body));
      }
      failures = 0;
      stopFallback();
      handlers.state('live', '');
      handlers.opened(lastId !== null);
      const reader = resp.body.getReader();
      const decoder = new TextDecoder();
      let buf = '';
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done || gen !== generation) break;
          buf += decoder.decode(value, { stream: true });
          let i;
          while ((i = buf.indexOf('\n\n')) >= 0) {
            const block = buf.slice(0, i);
            buf = buf.slice(i + 2);
            let name = 'message';
            let data = null;
            for (const line of block.split('\n')) {
              if (line === '' || line[0] === ':') continue;
              const c = line.indexOf(':');
              const field = c < 0 ? line : line.slice(0, c);
              let v = c < 0 ? '' : line.slice(c + 1);
              if (v[0] === ' ') v = v.slice(1);
              if (field === 'event') name = v;
              else if (field === 'id') lastId = v;
              else if (field === 'data') data = data === null ? v : data + '\n' + v;
            }
            if (data !== null) {
              try { handlers.event(name, JSON.parse(data)); } catch (e) { /* a bad event is skipped */ }
            }
          }
        }
      } catch (e) { /* the connection dropped: resume below */ }
      if (gen !== generation) return;
      // The stream ended (its lifetime, a catch-up's limit, a cut): resume
      // from the last id at once.
      setTimeout(() => connect(gen), 200);
    }
    function retry(gen, why) {
      if (gen !== generation) return;
      failures++;
      const wait = Math.min(RETRY_MAX_MS, 500 * 2 ** Math.min(failures, 5));
      handlers.state(failures > 1 ? 'fallback' : 'retrying', why);
      if (failures > 1) startFallback();
      setTimeout(() => connect(gen), wait);
    }
    // Leaving the page closes the stream at once: a browser opens at
    // most six connections to one host, and a stream kept by a page in
    // the back-forward cache would hold one.
    window.addEventListener('pagehide', () => { generation++; if (ctrl) ctrl.abort(); stopFallback(); });
    window.addEventListener('pageshow', (e) => { if (e.persisted) restart(); });
    function restart() {
      generation++;
      if (ctrl) ctrl.abort();
      lastId = null;
      failures = 0;
      stopFallback();
      connect(generation);
    }
    restart();
    return restart;
  }

  // debounce calls fn once, delay after the last of a burst of calls.
  function debounce(fn, delay) {
    let timer = 0;
    return () => { clearTimeout(timer); timer = setTimeout(fn, delay); };
  }

  // liveText says what the stream is doing, in words.
  function liveText(state, detail) {
    if (state === 'live') return 'live: following the change stream';
    if (state === 'retrying') return 'stream interrupted, reconnecting… (' + detail + ')';
    return 'stream unavailable (' + detail + '): refreshing every ' + (FALLBACK_MS / 1000) + ' s until it is back';
  }

  // Every second, the durations and countdowns on the page move on
  // without asking the server: [data-since] shows the time since, and
  // [data-until] the time left until, an instant.
  function startClock() {
    setInterval(() => {
      const now = Date.now();
      for (const e of document.querySelectorAll('[data-since]')) e.textContent = fmtMs(now - ms(e.dataset.since));
      for (const e of document.querySelectorAll('[data-until]')) e.textContent = countdown(ms(e.dataset.until) - now);
    }, 1000);
  }

  function countdown(left) {
    if (Number.isNaN(left)) return '–';
    return left >= 0 ? 'in ' + fmtMs(left) : 'due ' + fmtMs(-left) + ' ago';
  }

  // spark draws values (oldest first) as a polyline in an SVG of the
  // element's class, scaled to the largest value; no markup is parsed.
  function spark(svg, values) {
    const NS = 'http://www.w3.org/2000/svg';
    const top = Math.max(1, ...values);
    const n = values.length;
    const pts = values.map((v, i) => ((n < 2 ? 1 : i / (n - 1)) * 100).toFixed(1) + ',' + (19 - (v / top) * 18).toFixed(1)).join(' ');
    let line = svg.firstChild;
    if (!line) { line = document.createElementNS(NS, 'polyline'); svg.append(line); }
    line.setAttribute('points', pts);
    svg.dataset.samples = String(n);
  }

  function sparkSVG(label) {
    const svg = document.createElementNS('http://www.w3.org/2000/svg', 'svg');
    svg.setAttribute('class', 'spark');
    svg.setAttribute('viewBox', '0 0 100 20');
    svg.setAttribute('preserveAspectRatio', 'none');
    svg.setAttribute('role', 'img');
    svg.setAttribute('aria-label', label);
    return svg;
  }

  // ---- legend ----

  function renderLegend() {
    const ul = $('legend');
    clear(ul);
    for (const s of STATES) ul.append(el('li', {}, badge(s)));
    ul.append(el('li', {}, el('span', { class: 'muted' }, 'Striped bar: the current state, still open.')));
  }

  // ---- board ----

  function boardFilters() {
    const q = new URLSearchParams(location.search);
    const state = q.get('state') || '';
    return { state: STATES.includes(state) ? state : '', prefix: (q.get('prefix') || '').slice(0, 128),
      labels: parseLabels(q.getAll('label').join(' ')) };
  }

  // parseLabels reads "k=v" conditions separated by spaces or commas (at
  // most 16, as the API allows); anything else is left out.
  function parseLabels(text) {
    return text.split(/[\s,]+/).filter((c) => /^[a-z0-9][a-z0-9._\/-]{0,62}=.{0,256}$/.test(c)).slice(0, 16);
  }

  function setBoardFilters(f) {
    const q = new URLSearchParams();
    if (f.state) q.set('state', f.state);
    if (f.prefix) q.set('prefix', f.prefix);
    for (const l of f.labels || []) q.append('label', l);
    const s = q.toString();
    history.replaceState(null, '', '/ui/' + (s ? '?' + s : ''));
  }

  function listQuery(state, prefix, labels, limit, cursor) {
    const q = new URLSearchParams();
    if (state) q.set('state', state);
    if (prefix) q.set('prefix', prefix);
    for (const l of labels || []) q.append('label', l);
    q.set('limit', String(limit));
    if (cursor) q.set('cursor', cursor);
    return '/v1/sessions?' + q.toString();
  }

  function startBoard() {
    $('board-view').hidden = false;
    document.title = 'Sessions · correx';
    const sel = $('filter-state');
    for (const s of STATES) sel.append(el('option', { value: s }, s));
    let filters = boardFilters();
    sel.value = filters.state;
    $('filter-prefix').value = filters.prefix;
    $('filter-labels').value = filters.labels.join(' ');

    // Counts: one button per state; pressing it filters the list.
    const counts = $('counts');
    const countEls = {};
    const totalBtn = el('button', { type: 'button', class: 'count', 'data-count': 'TOTAL', 'aria-pressed': 'false' },
      el('span', { class: 'swatch', 'aria-hidden': 'true' }), el('span', { class: 'n' }, '–'), el('span', { class: 'label' }, 'all states'),
      sparkSVG('all sessions over the last minutes'));
    totalBtn.addEventListener('click', () => applyFilters({ state: '', prefix: filters.prefix, labels: filters.labels }));
    counts.append(el('li', {}, totalBtn));
    countEls.TOTAL = totalBtn;
    for (const s of STATES) {
      const b = el('button', { type: 'button', class: 'count', 'data-count': s, 'aria-pressed': 'false' },
        el('span', { class: 'swatch st-' + s, 'aria-hidden': 'true' }), el('span', { class: 'n' }, '–'), stateLabel(s),
        sparkSVG(s + ' over the last minutes'));
      b.addEventListener('click', () => applyFilters({ state: s, prefix: filters.prefix, labels: filters.labels }));
      counts.append(el('li', {}, b));
      countEls[s] = b;
    }
    function markPressed() {
      for (const [k, b] of Object.entries(countEls)) {
        b.setAttribute('aria-pressed', String(k === (filters.state || 'TOTAL')));
      }
    }
    markPressed();

    let lagNow = null; // the projector's lag as the latest stats said
    let partsNow = []; // each partition's progress as the latest stats said
    let lastStats = 0; // when the board last read the stats
    async function refreshCounts() {
      try {
        const { body } = await api('/v1/stats');
        const by = (body.sessions && body.sessions.byState) || {};
        for (const s of STATES) countEls[s].querySelector('.n').textContent = String(by[s] || 0);
        countEls.TOTAL.querySelector('.n').textContent = String((body.sessions && body.sessions.total) || 0);
        $('counts-scope').textContent = body.prefix ? '(sessions under ' + body.prefix + ')' : '';
        $('counts-updated').dataset.updated = 'updated ' + new Date().toLocaleTimeString();
        // The projector's lag: the sum over partitions, for a token that
        // sees them (admin, no prefix); null otherwise.
        const parts = body.partitions;
        lagNow = Array.isArray(parts) ? parts.reduce((a, p) => a + (typeof p.lag === 'number' ? p.lag : 0), 0) : null;
        partsNow = Array.isArray(parts) ? parts : [];
        lastStats = Date.now();
        showLive();
        if (Array.isArray(parts)) refreshVerify(); else $('verify-badge').hidden = true;
      } catch (e) {
        $('counts-updated').textContent = 'counts unavailable: ' + e.message;
      }
    }

    // The background verifiers' report (GET /v1/verify), for a token that
    // sees the partitions (admin, no prefix): a badge, green while every
    // mismatch found was repaired.
    async function refreshVerify() {
      const badge = $('verify-badge');
      try {
        const { body } = await api('/v1/verify');
        const found = Object.values(body.mismatches || {}).reduce((a, n) => a + n, 0);
        const left = found - body.repaired;
        badge.textContent = 'verified against the log: ' + body.checked + ' checked, ' + found + ' mismatches, ' +
          body.repaired + ' repaired' + (body.lastCycle ? ', last cycle ' + Math.round(body.lastCycle.durationMs / 1000) + ' s' : '');
        badge.className = 'verify-badge small ' + (left > 0 ? 'bad' : 'ok');
        badge.hidden = false;
      } catch (e) {
        badge.hidden = true;
      }
    }

    async function refreshWaiting() {
      const tbody = $('waiting').tBodies[0];
      const rows = [];
      const more = [];
      try {
        const pages = await Promise.all(WAITING.map((s) => api(listQuery(s, filters.prefix, filters.labels, WAITING_READ, ''))));
        pages.forEach((p, i) => {
          rows.push(...p.body.sessions);
          if (p.body.next) more.push(WAITING[i]);
        });
      } catch (e) {
        $('waiting-note').textContent = 'unavailable: ' + e.message;
        return;
      }
      rows.sort((a, b) => ms(a.stateEnteredAt) - ms(b.stateEnteredAt) || (a.sessionId < b.sessionId ? -1 : 1));
      const now = Date.now();
      clear(tbody);
      for (const s of rows.slice(0, WAITING_SHOWN)) {
        tbody.append(el('tr', { 'data-session': s.sessionId },
          el('td', {}, sessionLink(s.sessionId)), el('td', {}, badge(s.state)),
          el('td', { 'data-since': s.stateEnteredAt }, fmtMs(now - ms(s.stateEnteredAt))), el('td', {}, timeEl(s.stateEnteredAt)),
          el('td', { class: 'goal-cell', title: s.goal || null }, s.goal || '')));
      }
      if (rows.length === 0) tbody.append(el('tr', { class: 'empty' }, el('td', { colspan: '5' }, 'No session is waiting.')));
      $('waiting-note').textContent = more.length
        ? 'Ordered among the first ' + WAITING_READ + ' sessions the API lists in ' + more.join(', ') + '; more exist.'
        : '';
    }

    // Paging: the cursors of the pages before the current one.
    let cursors = [];
    let cursor = '';
    let next = null;
    async function refreshList() {
      const tbody = $('list').tBodies[0];
      let page;
      try {
        page = (await api(listQuery(filters.state, filters.prefix, filters.labels, PAGE, cursor))).body;
      } catch (e) {
        clear(tbody);
        tbody.append(el('tr', { class: 'empty' }, el('td', { colspan: '6' }, 'Listing unavailable: ' + e.message)));
        return;
      }
      // Most recently updated first. GET /v1/sessions has no ordering to
      // ask for (its order is stable but not meaningful, api/openapi.json),
      // so the page shown is sorted here: the order holds within a page,
      // not across pages, and the page info says so.
      const rows = page.sessions.slice().sort((a, b) => ms(b.updatedAt) - ms(a.updatedAt) || (a.sessionId < b.sessionId ? -1 : 1));
      const now = Date.now();
      clear(tbody);
      for (const s of rows) {
        tbody.append(el('tr', { 'data-session': s.sessionId },
          el('td', {}, sessionLink(s.sessionId)), el('td', {}, badge(s.state)),
          el('td', { 'data-since': s.terminal ? null : s.stateEnteredAt }, s.terminal ? '–' : fmtMs(now - ms(s.stateEnteredAt))), el('td', {}, timeEl(s.updatedAt)),
          el('td', {}, String((s.counters && s.counters.events) || 0)),
          el('td', { class: 'goal-cell', title: s.goal || null }, s.goal || '')));
      }
      if (page.sessions.length === 0) tbody.append(el('tr', { class: 'empty' }, el('td', { colspan: '6' }, 'No session matches.')));
      next = page.next;
      $('page-next').disabled = !next;
      $('page-prev').disabled = cursors.length === 0;
      $('page-first').disabled = cursors.length === 0;
      $('page-info').textContent = 'page ' + (cursors.length + 1) + ' · ' + page.sessions.length + ' sessions' +
        (page.sessions.length > 1 ? ', most recently updated first' + (next || cursors.length ? ' within the page' : '') : '');
    }
    $('page-next').addEventListener('click', () => { if (next) { cursors.push(cursor); cursor = next; refreshList(); } });
    $('page-prev').addEventListener('click', () => { if (cursors.length) { cursor = cursors.pop(); refreshList(); } });
    $('page-first').addEventListener('click', () => { cursors = []; cursor = ''; refreshList(); });

    function applyFilters(f) {
      filters = f;
      sel.value = f.state;
      $('filter-prefix').value = f.prefix;
      $('filter-labels').value = (f.labels || []).join(' ');
      setBoardFilters(f);
      markPressed();
      cursors = []; cursor = '';
      refreshList();
      refreshWaiting();
    }
    $('filters').addEventListener('submit', (ev) => {
      ev.preventDefault();
      applyFilters({ state: sel.value, prefix: $('filter-prefix').value.trim(), labels: parseLabels($('filter-labels').value) });
    });

    // One stream of every change the token may see: a change redraws the
    // counts soon, and the listings a little later.
    let live = { state: 'retrying', detail: 'connecting' };
    function showLive() {
      const u = $('counts-updated');
      u.textContent = liveText(live.state, live.detail) + (u.dataset.updated ? ' · ' + u.dataset.updated : '');
    }
    const soonCounts = debounce(refreshCounts, COUNTS_DEBOUNCE_MS);
    const soonLists = debounce(() => { refreshWaiting(); refreshList(); }, LIST_DEBOUNCE_MS);
    const all = () => { refreshCounts(); refreshWaiting(); refreshList(); };
    // Sparklines: every SPARK_EVERY_MS the counts shown (kept current by
    // the stream) and the changes the stream brought since, per second;
    // sampled here, so they cost no request.
    const history = {};
    const rates = [];
    const lags = [];
    const partLags = {}; // by partition: its sparkline, its latest value, its samples
    let changes = 0;
    const rateSVG = sparkSVG('changes per second over the last minutes');
    const lagSVG = sparkSVG('events the projector is behind over the last minutes');
    // Each stat is a group (label, sparkline, value) that wraps as a whole.
    $('rates').append(
      el('span', { class: 'stat' }, el('span', { class: 'muted' }, 'changes/s, last 5 min'), rateSVG, el('span', { id: 'rate-now' }, '–')),
      el('span', { class: 'stat' }, el('span', { class: 'muted' }, 'projector lag (events)'), lagSVG, el('span', { id: 'lag-now' }, '–')));
    setInterval(() => {
      // Lag moves without changes (a stalled projector): read the stats
      // when no change made the board read them since the last sample.
      if (Date.now() - lastStats >= SPARK_EVERY_MS) refreshCounts();
      if (lagNow === null) {
        $('lag-now').textContent = 'shown to an admin token';
      } else {
        lags.push(lagNow);
        if (lags.length > SPARK_SAMPLES) lags.shift();
        spark(lagSVG, lags);
        $('lag-now').textContent = lagNow + ' behind';
      }
      // One sparkline per partition, in partition order.
      for (const p of partsNow) {
        const key = String(p.partition);
        let part = partLags[key];
        if (!part) {
          const svg = sparkSVG('lag of partition ' + key + ' over the last minutes');
          const now = el('span', { class: 'muted' }, '');
          const box = el('span', { class: 'lag-part', 'data-partition': key }, el('span', { class: 'muted' }, 'p' + key), svg, now);
          const boxes = Array.from($('lag-parts').children);
          const after = boxes.find((b) => Number(b.dataset.partition) > p.partition);
          $('lag-parts').insertBefore(box, after || null);
          part = partLags[key] = { svg, now, values: [] };
        }
        const v = typeof p.lag === 'number' ? p.lag : 0;
        part.values.push(v);
        if (part.values.length > SPARK_SAMPLES) part.values.shift();
        spark(part.svg, part.values);
        part.now.textContent = String(v);
      }
      for (const [k, b] of Object.entries(countEls)) {
        const v = Number(b.querySelector('.n').textContent);
        if (Number.isNaN(v)) continue;
        const h = history[k] || (history[k] = []);
        h.push(v);
        if (h.length > SPARK_SAMPLES) h.shift();
        spark(b.querySelector('.spark'), h);
      }
      rates.push(changes / (SPARK_EVERY_MS / 1000));
      changes = 0;
      if (rates.length > SPARK_SAMPLES) rates.shift();
      spark(rateSVG, rates);
      $('rate-now').textContent = rates[rates.length - 1].toFixed(1) + '/s now';
    }, SPARK_EVERY_MS);
    const restart = watch('/v1/watch', {
      event: (name) => { if (name === 'change') { changes++; soonCounts(); soonLists(); } },
      opened: (resumed) => { if (!resumed) all(); },
      state: (state, detail) => { live = { state, detail }; $('board-view').dataset.live = state; showLive(); },
      fallback: all,
    });
    all();
    return () => { all(); restart(); };
  }

  // ---- session page ----

  // intervals returns the closed state intervals from the transitions:
  // the i-th transition closes the interval of its "from" state, which
  // began at the previous transition (or at createdAt for the first, unless
  // older transitions were dropped from the kept window).
  function intervals(s) {
    const tr = s.transitions || [];
    const out = [];
    // Nothing returns to CREATED, so a kept window that does not start by
    // leaving CREATED has lost its oldest transitions.
    const truncated = tr.length > 0 && tr[0].from !== 'CREATED';
    for (let i = 0; i < tr.length; i++) {
      const start = i === 0 ? (truncated ? null : s.createdAt) : tr[i - 1].at;
      if (start === null) continue;
      const d = Math.max(0, ms(tr[i].at) - ms(start));
      out.push({ state: tr[i].from, start, end: tr[i].at, ms: d });
    }
    return { list: out, truncated };
  }

  // renderTimeline draws the closed intervals as flex items that grow in
  // proportion to their durations from a basis of 0, so the browser shares
  // the row out exactly; an instant (0 ms) grows by nothing and keeps the
  // bar's CSS min-width, a thin mark, and the flex algorithm takes that
  // width from the others in proportion, keeping them to scale among
  // themselves and the sum within the row. The open state has a fixed
  // share, or the rest of the row when no closed interval has a length.
  function renderTimeline(s) {
    const ol = $('timeline');
    clear(ol);
    const { list, truncated } = intervals(s);
    const total = list.reduce((a, iv) => a + iv.ms, 0);
    const open = !s.terminal;
    list.forEach((iv, i) => {
      const li = el('li', {
        class: 'bar closed st-' + iv.state, 'data-state': iv.state, 'data-ms': String(iv.ms), 'data-index': String(i),
        title: iv.state + ' · ' + fmtMs(iv.ms) + ' · ' + fmtTime(iv.start) + ' → ' + fmtTime(iv.end),
      }, el('span', { class: 'bar-state' }, iv.state), el('span', { class: 'bar-dur' }, fmtMs(iv.ms)));
      // CSSOM, not a style attribute: allowed by the page's CSP.
      li.style.flexGrow = String(total > 0 ? iv.ms / total : 0);
      ol.append(li);
    });
    if (open) {
      const so = Math.max(0, Date.now() - ms(s.stateEnteredAt));
      const li = el('li', { class: 'bar open st-' + s.state, 'data-state': s.state, title: s.state + ' since ' + fmtTime(s.stateEnteredAt) + ' (ongoing)' },
        el('span', { class: 'bar-state' }, s.state), el('span', { class: 'bar-dur' }, fmtMs(so) + ' so far'));
      if (total > 0) li.style.flex = '0 0 ' + OPEN_SHARE + '%';
      else li.style.flexGrow = '1';
      ol.append(li);
    }
    const axis = $('axis');
    clear(axis);
    axis.append(el('span', {}, (truncated ? 'earlier intervals not kept · ' : '') + 'start ' + fmtTime(list.length ? list[0].start : s.createdAt)));
    axis.append(el('span', {}, 'closed intervals: ' + fmtMs(total)));
    axis.append(el('span', {}, open ? 'now: in ' + s.state + ' since ' + fmtTime(s.stateEnteredAt)
      : 'ended ' + s.state + ' at ' + fmtTime(s.stateEnteredAt)));

    const tbody = $('intervals').tBodies[0];
    clear(tbody);
    for (const iv of list) {
      tbody.append(el('tr', {}, el('td', {}, badge(iv.state)), el('td', {}, timeEl(iv.start)), el('td', {}, timeEl(iv.end)), el('td', {}, fmtMs(iv.ms))));
    }
    if (open) tbody.append(el('tr', {}, el('td', {}, badge(s.state)), el('td', {}, timeEl(s.stateEnteredAt)), el('td', {}, 'now'), el('td', {}, 'ongoing')));
  }

  function dl(target, pairs) {
    clear(target);
    for (const [k, v] of pairs) {
      if (v === undefined) continue;
      target.append(el('dt', {}, k), el('dd', {}, v === null ? '–' : v));
    }
  }

  // value renders any JSON value as text: objects as key/value lists,
  // arrays as lists, session ids under known link fields as links.
  function value(v, key) {
    if (v === null || v === undefined) return el('span', { class: 'muted' }, 'none');
    if (typeof v === 'string') {
      if (LINK_FIELDS.has(key) && v) return sessionLink(v);
      if (/At$/.test(key || '') || key === 'at' || RFC3339.test(v)) return timeEl(v);
      return el('span', {}, v);
    }
    if (typeof v !== 'object') return el('span', {}, String(v));
    if (Array.isArray(v)) {
      const ul = el('ul', { class: 'chips' });
      for (const x of v) ul.append(el('li', {}, value(x, key)));
      return ul;
    }
    if (key === 'labels') {
      const ul = el('ul', { class: 'chips' });
      for (const [k, x] of Object.entries(v)) ul.append(el('li', { class: 'mono' }, k + '=' + (typeof x === 'string' ? x : JSON.stringify(x))));
      return ul;
    }
    if (key === 'metadata') return el('pre', { class: 'mono' }, JSON.stringify(v, null, 2));
    const d = el('dl', { class: 'facts' });
    for (const [k, x] of Object.entries(v)) d.append(el('dt', {}, k), el('dd', {}, value(x, k)));
    return d;
  }

  function renderSession(s) {
    document.title = s.sessionId + ' · correx';
    $('s-id').textContent = s.sessionId;
    const st = $('s-state');
    clear(st);
    st.append(badge(s.state));
    if (s.terminal) st.append(' ', el('span', { class: 'muted small' }, 'terminal'));
    $('s-goal').textContent = s.goal || '';
    $('s-body').hidden = false;
    renderTimeline(s);

    renderDeadline(s);
    renderFailure(s);
    renderChain(s);
    renderActions(s);
    renderApprovals(s);

    const pos = s.position ? s.position.partition + ':' + s.position.offset : null;
    dl($('facts'), [
      ['state', badge(s.state)],
      ['in state since', timeEl(s.stateEnteredAt)],
      ['created', timeEl(s.createdAt)],
      ['updated', timeEl(s.updatedAt)],
      ['correlation id', el('span', { class: 'mono' }, s.correlationId || '')],
      ['predecessor', s.predecessorSessionId ? sessionLink(s.predecessorSessionId) : null],
      ['execution time', el('span', { id: 's-execution', title: 'time in CREATED, INITIALIZING, ACTIVE and RECOVERING, closed intervals' }, fmtMs(s.executionMs || 0))],
      ['version', String(s.version)],
      ['position', pos ? el('span', { class: 'mono' }, pos) : null],
      ['first offset', String(s.firstOffset)],
      ['last event id', el('span', { class: 'mono' }, s.lastEventId || '')],
      ['digest', el('span', { class: 'mono' }, s.digest || '')],
    ]);
    const durs = Object.entries(s.durationsMs || {}).sort((a, b) => STATES.indexOf(a[0]) - STATES.indexOf(b[0]));
    dl($('durations'), durs.length ? durs.map(([k, v]) => [k, el('span', { 'data-duration': k }, fmtMs(v))]) : [['none closed yet', null]]);
    dl($('counters'), Object.entries(s.counters || {}).map(([k, v]) => [k, typeof v === 'object' ? value(v, k) : String(v)]));

    // The approval member is not repeated here: the Approvals section
    // shows all of it (renderApprovals).
    const det = $('details-body');
    clear(det);
    const blocks = [['cancellation', s.cancellation], ['recovery', s.recovery], ['failure', s.failure]];
    for (const [name, v] of blocks) {
      const box = el('section', { 'data-detail': name }, el('h3', { class: 'small' }, name));
      if (v === null || v === undefined) box.append(el('p', { class: 'muted small' }, 'none'));
      else box.append(value(v, name));
      det.append(box);
    }

    // The members not shown in place (labels, metadata, parent, deadline,
    // successor, replacement, annotations, ..., and any later one).
    const extras = Object.keys(s).filter((k) => !KNOWN.has(k) && s[k] !== null && s[k] !== undefined);
    extras.sort((a, b) => {
      const ia = EXTRAS_FIRST.indexOf(a), ib = EXTRAS_FIRST.indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || (a < b ? -1 : 1);
    });
    $('extras').hidden = extras.length === 0;
    dl($('extras-body'), extras.map((k) => [k, value(s[k], k)]));

    const tt = $('transitions').tBodies[0];
    clear(tt);
    for (const t of (s.transitions || []).slice().reverse()) {
      tt.append(el('tr', {}, el('td', {}, timeEl(t.at)), el('td', {}, badge(t.from)), el('td', {}, badge(t.to)),
        el('td', { class: 'mono' }, t.type), el('td', { class: 'mono' }, t.eventId)));
    }
    if (!(s.transitions || []).length) tt.append(el('tr', { class: 'empty' }, el('td', { colspan: '5' }, 'No transition yet.')));
    const rt = $('rejections').tBodies[0];
    clear(rt);
    for (const r of (s.rejections || []).slice().reverse()) {
      rt.append(el('tr', {}, el('td', {}, timeEl(r.at)), el('td', { class: 'mono' }, r.type), el('td', {}, badge(r.state)),
        el('td', { class: 'reason' }, r.reason), el('td', { class: 'mono' }, r.eventId)));
    }
    if (!(s.rejections || []).length) rt.append(el('tr', { class: 'empty' }, el('td', { colspan: '5' }, 'No rejected event.')));
  }

  // renderDeadline shows the snapshot's next deadline with a countdown that
  // the page's clock moves on.
  function renderDeadline(s) {
    const box = $('s-deadline');
    clear(box);
    const d = s.deadline;
    if (!d || !d.at || s.terminal) {
      box.append(el('span', { class: 'muted' }, 'No deadline armed.'));
      return;
    }
    box.append('Next deadline: ', el('strong', { class: 'mono' }, String(d.kind || 'timeout')), ' at ', timeEl(d.at), ' · ',
      el('strong', { 'data-until': d.at, id: 's-countdown' }, countdown(ms(d.at) - Date.now())));
  }

  // renderFailure shows how a FAILED session failed: its category, code
  // and whether a retry may succeed (docs/lifecycle.md, "Structured failures").
  function renderFailure(s) {
    const box = $('s-failure');
    clear(box);
    const f = s.failure;
    box.hidden = !f;
    if (!f) return;
    box.append('Failed: category ', el('strong', { class: 'mono', id: 'failure-category' }, f.category || 'unknown'),
      ', code ', el('strong', { class: 'mono', id: 'failure-code' }, f.code || 'none'),
      ', ', el('strong', { id: 'failure-retryable' }, f.retryable ? 'retryable' : 'not retryable'),
      f.reason ? ': ' : '', f.reason ? el('q', {}, f.reason) : '');
  }

  // renderApprovals shows the approval member whole: the pending request,
  // the last decisions, newest first, and the total of the finished waits
  // (docs/lifecycle.md, "Approvals that match their request").
  function renderApprovals(s) {
    const p = pendingApproval(s);
    const pend = $('approval-pending');
    clear(pend);
    if (p) {
      pend.append('Pending: request ', el('span', { class: 'mono', 'data-request': p.requestId || '' }, p.requestId || '(no id)'),
        p.since ? ' since ' : '', p.since ? timeEl(p.since) : '', p.reason ? ': ' : '', p.reason ? el('q', {}, p.reason) : '');
    } else {
      pend.append(el('span', { class: 'muted small' }, 'No request pending.'));
    }
    const tb = $('decisions').tBodies[0];
    clear(tb);
    const ds = ((s.approval || {}).decisions || []).slice().reverse();
    for (const d of ds) {
      tb.append(el('tr', { 'data-decision': d.decision }, el('td', {}, timeEl(d.at)), el('td', { class: 'mono' }, d.requestId),
        el('td', {}, d.decision), el('td', {}, d.by || ''), el('td', { class: 'reason' }, d.reason || ''), el('td', {}, fmtMs(d.waitedMs || 0))));
    }
    if (!ds.length) tb.append(el('tr', { class: 'empty' }, el('td', { colspan: '6' }, 'No decision yet.')));
    $('approval-waited').textContent = ds.length ? 'Time waited for decisions, in all: ' + fmtMs((s.approval || {}).waitedMs || 0) : '';
  }

  // renderChain shows the replacement chain as links: the predecessor this
  // session replaces, and the successor that replaced it.
  function renderChain(s) {
    const ol = $('chain');
    clear(ol);
    const pred = s.predecessorSessionId || (s.replacement && s.replacement.predecessorSessionId) || null;
    const succ = s.successorSessionId || null;
    $('chain-box').hidden = !pred && !succ;
    if (pred) ol.append(el('li', { 'data-role': 'predecessor' }, sessionLink(pred), el('span', { class: 'muted small' }, ' predecessor')));
    const me_ = el('li', { 'data-role': 'this' }, el('span', { class: 'mono' }, s.sessionId), el('span', { class: 'muted small' }, ' this session'));
    if (s.replacement && s.replacement.status) me_.append(el('span', { class: 'muted small' }, ' · replacement ' + s.replacement.status));
    ol.append(me_);
    if (succ) ol.append(el('li', { 'data-role': 'successor' }, sessionLink(succ), el('span', { class: 'muted small' }, ' successor')));
  }

  // pendingApproval reads the approval block as docs/lifecycle.md, "Approvals that match their request", shapes it
  // ({pending: {requestId, since, reason} | null}), or the older
  // {pendingSince} when that is what the service writes.
  function pendingApproval(s) {
    const a = s.approval || {};
    if (a.pending && typeof a.pending === 'object') return a.pending;
    if (a.pendingSince) return { since: a.pendingSince };
    return null;
  }

  // The actions a state offers; the fold decides in the end (a refused one
  // shows among the rejections).
  function actionsFor(s) {
    if (s.terminal) return [];
    const out = [];
    if (s.state === 'AWAITING_APPROVAL') out.push('approve', 'deny');
    if (s.state === 'ACTIVE') out.push('pause');
    if (s.state === 'PAUSED') out.push('resume');
    if (s.state !== 'CANCELLING') out.push('cancel');
    const graceful = !(s.cancellation && s.cancellation.mode === 'forced');
    if (s.state !== 'CANCELLING' || graceful) out.push('force-cancel');
    return out;
  }

  let actionSession = null; // the snapshot the action buttons act on

  function renderActions(s) {
    actionSession = s;
    const box = $('actions');
    const allowed = mayWrite(s.sessionId) ? actionsFor(s) : [];
    box.hidden = allowed.length === 0;
    for (const b of box.querySelectorAll('button[data-action]')) b.hidden = !allowed.includes(b.dataset.action);
    if (!allowed.includes('force-cancel')) askForce(false);
    const p = pendingApproval(s);
    const pend = $('pending');
    clear(pend);
    if (p && s.state === 'AWAITING_APPROVAL') {
      pend.append('Pending approval', p.requestId ? ' ' : '', p.requestId ? el('span', { class: 'mono', id: 'pending-id' }, p.requestId) : '',
        p.since ? ' since ' : '', p.since ? timeEl(p.since) : '', p.reason ? ': ' : '', p.reason ? el('q', {}, p.reason) : '');
    }
  }

  // askForce shows or hides the question that Force cancel asks before it
  // sends anything. It is part of the page, not window.confirm(): a dialog
  // stops the page's script, and so its streams, while it is open.
  function askForce(show) {
    $('force-confirm').hidden = !show;
    if (show) {
      $('action-result').textContent = '';
      $('force-confirm-no').focus(); // Enter twice does not force anything
    }
  }

  // act sends one action for the session shown, and says in words what
  // the service answered; the result itself arrives through the stream.
  async function act(action) {
    const s = actionSession;
    if (!s) return;
    const out = $('action-result');
    const reason = $('action-reason').value.trim();
    const body = { action: action === 'force-cancel' ? 'cancel' : action };
    if (action === 'force-cancel') body.mode = 'forced';
    if (reason && ['approve', 'deny', 'cancel', 'force-cancel'].includes(action)) body.reason = reason;
    const p = pendingApproval(s);
    if ((action === 'approve' || action === 'deny') && p && p.requestId) body.requestId = p.requestId;
    for (const b of $('actions').querySelectorAll('button')) b.disabled = true;
    out.className = '';
    out.textContent = 'sending ' + action + '…';
    try {
      await post('/v1/sessions/' + encodeURIComponent(s.sessionId) + '/actions', body);
      out.className = 'ok';
      out.textContent = action + ' sent; the session follows when it is folded.';
      $('action-reason').value = '';
    } catch (e) {
      out.className = 'bad';
      const why = e.status === 403 ? 'Not allowed: ' : e.status === 400 ? 'Refused: ' : 'Failed: ';
      out.textContent = why + e.message + (e.status ? ' (HTTP ' + e.status + ')' : '');
    } finally {
      for (const b of $('actions').querySelectorAll('button')) b.disabled = false;
    }
  }

  // renderChildren lists the sessions whose parent is this one.
  function renderChildren(page) {
    const tbody = $('children').tBodies[0];
    clear(tbody);
    for (const c of page.sessions) {
      tbody.append(el('tr', { 'data-session': c.sessionId, 'data-state': c.state },
        el('td', {}, sessionLink(c.sessionId)), el('td', {}, badge(c.state)), el('td', {}, timeEl(c.updatedAt))));
    }
    if (page.sessions.length === 0) tbody.append(el('tr', { class: 'empty' }, el('td', { colspan: '3' }, 'No child session.')));
    $('children-note').textContent = page.next ? 'The first ' + page.sessions.length + ' children found; more may exist.' : '';
  }

  function startSession(id) {
    $('session-view').hidden = false;
    $('s-id').textContent = id;
    document.title = id + ' · correx';
    const path = '/v1/sessions/' + encodeURIComponent(id);
    let etag = null;
    let last = null;
    async function refresh() {
      try {
        const r = await api(path, etag);
        if (r.status === 200) {
          etag = r.etag;
          last = r.body;
          renderSession(last);
        } else if (last) {
          renderTimeline(last); // the open state's "so far" moves on
        }
        $('s-message').textContent = '';
      } catch (e) {
        if (e.status === 404) {
          etag = null; last = null;
          $('s-body').hidden = true;
          $('s-message').textContent = 'No such session, or not visible with this token.';
        } else {
          $('s-message').textContent = 'Could not read the session: ' + e.message;
        }
      }
    }
    $('verify').addEventListener('click', async () => {
      const out = $('verify-result');
      out.className = '';
      out.textContent = 'rebuilding from the log…';
      $('verify').disabled = true;
      try {
        const { body } = await api(path + '/replay');
        if (body.matchesStored) {
          out.className = 'ok';
          out.textContent = 'matches the stored snapshot (rebuilt to ' + body.storedPosition.partition + ':' + body.storedPosition.offset + ')';
        } else {
          out.className = 'bad';
          out.textContent = 'DIFFERS from the stored snapshot: the rebuild from the log gives version ' +
            body.snapshot.version + ', digest ' + body.snapshot.digest;
        }
      } catch (e) {
        if (e.status === 403) {
          $('verify').hidden = true;
          out.textContent = 'This token may not verify (needs the admin scope).';
        } else {
          out.className = 'bad';
          out.textContent = 'Verification failed: ' + e.message;
        }
      } finally {
        $('verify').disabled = false;
      }
    });
    // Force cancel asks first; any other action goes at once.
    for (const b of $('actions').querySelectorAll('button[data-action]')) {
      b.addEventListener('click', () => {
        if (b.dataset.action === 'force-cancel') { askForce(true); return; }
        askForce(false);
        act(b.dataset.action);
      });
    }
    $('force-confirm-yes').addEventListener('click', () => { askForce(false); act('force-cancel'); });
    $('force-confirm-no').addEventListener('click', () => {
      askForce(false);
      $('actions').querySelector('[data-action=force-cancel]').focus();
    });
    // The whole history, read from the log a page at a time on request.
    const hpath = path + '/history';
    $('history-json').href = hpath + '?limit=' + PAGE;
    let hnext = null;
    async function loadHistory(after) {
      const note = $('history-note');
      note.textContent = 'reading the log…';
      try {
        const { body } = await api(hpath + '?limit=' + PAGE + (after ? '&after=' + encodeURIComponent(after) : ''));
        const tb = $('history').tBodies[0];
        if (!after) clear(tb);
        for (const h of body.history || []) {
          const at = el('button', { type: 'button', class: 'asof', 'data-version': String(h.version),
            title: 'the session as it was right after version ' + h.version }, String(h.version));
          tb.append(el('tr', { 'data-outcome': h.outcome, 'data-version': String(h.version), 'data-type': h.type }, el('td', {}, at), el('td', {}, timeEl(h.occurredAt)),
            el('td', { class: 'mono' }, h.type), el('td', {}, h.outcome), el('td', {}, h.from ? badge(h.from) : ''),
            el('td', {}, h.to ? badge(h.to) : ''), el('td', { class: 'reason' }, h.reason || ''), el('td', { class: 'mono' }, h.eventId)));
        }
        $('history').hidden = false;
        hnext = body.next || null;
        $('history-more').hidden = !hnext;
        note.textContent = tb.rows.length + ' events shown' + (hnext ? '; more follow' : '; the whole history');
      } catch (e) {
        note.textContent = 'History unavailable: ' + e.message;
      }
    }
    // A click on an event shows the session as it was right after the
    // version it left (GET ?asOf=, folded again from the log).
    async function showAsOf(version, type) {
      const box = $('asof');
      const note = $('asof-note');
      box.hidden = false;
      $('asof-title').textContent = 'As it was at version ' + version + (type ? ' (after ' + type + ')' : '');
      $('asof-json').href = path + '?asOf=' + encodeURIComponent(version);
      clear($('asof-facts'));
      note.textContent = 'folding the log…';
      try {
        const { body: s } = await api(path + '?asOf=' + encodeURIComponent(version));
        note.textContent = 'version ' + s.version + ' of the session, read from the log' + (s.archived ? ' (archived)' : '');
        const p = pendingApproval(s);
        dl($('asof-facts'), [
          ['state', badge(s.state)],
          ['in state since', timeEl(s.stateEnteredAt)],
          ['updated', timeEl(s.updatedAt)],
          ['version', String(s.version)],
          ['events seen', String((s.counters || {}).events || 0)],
          ['pending approval', p ? el('span', { class: 'mono' }, (p.requestId || '') + (p.reason ? ' · ' + p.reason : '')) : null],
          ['execution time', fmtMs(s.executionMs || 0)],
          ['digest', el('span', { class: 'mono' }, s.digest || '')],
        ]);
      } catch (e) {
        note.textContent = 'Unavailable: ' + e.message;
      }
    }
    $('history').tBodies[0].addEventListener('click', (e) => {
      const tr = e.target.closest('tr[data-version]');
      if (tr) showAsOf(tr.dataset.version, tr.dataset.type);
    });
    $('asof-close').addEventListener('click', () => { $('asof').hidden = true; });
    $('history-load').addEventListener('click', () => loadHistory(null));
    $('history-more').addEventListener('click', () => { if (hnext) loadHistory(hnext); });
    // The listing has no index by parent: it filters each scanned page,
    // so a page may hold no child while more follow. Read up to
    // CHILDREN_PAGES pages of 1000 sessions for the first CHILDREN_SHOWN.
    async function refreshChildren() {
      try {
        const found = [];
        let cursor = '';
        let next = null;
        for (let i = 0; i < CHILDREN_PAGES; i++) {
          const q = '/v1/sessions?parent=' + encodeURIComponent(id) + '&limit=1000' + (cursor ? '&cursor=' + encodeURIComponent(cursor) : '');
          const page = (await api(q)).body;
          found.push(...page.sessions);
          next = page.next;
          if (!next || found.length >= CHILDREN_SHOWN) break;
          cursor = next;
        }
        renderChildren({ sessions: found.slice(0, CHILDREN_SHOWN), next: next || found.length > CHILDREN_SHOWN });
      } catch (e) {
        $('children-note').textContent = 'Children unavailable: ' + e.message;
      }
    }
    let live = { state: 'retrying', detail: 'connecting' };
    function showLive() { $('s-live').textContent = liveText(live.state, live.detail); }
    // The session's own stream starts with its snapshot; a change after
    // it reads the snapshot again (If-None-Match: 304 when nothing moved).
    const soon = debounce(refresh, 100);
    const restartSelf = watch(path + '/watch', {
      event: (name, data) => {
        if (name === 'snapshot' && data && data.sessionId === id) { last = data; etag = null; renderSession(data); $('s-message').textContent = ''; }
        else if (name === 'change') soon();
      },
      opened: (resumed) => { if (resumed) refresh(); },
      state: (state, detail) => { live = { state, detail }; $('session-view').dataset.live = state; showLive(); },
      fallback: refresh,
    });
    const soonChildren = debounce(refreshChildren, 300);
    const restartChildren = watch('/v1/watch?parent=' + encodeURIComponent(id), {
      event: (name) => { if (name === 'change') soonChildren(); },
      opened: () => refreshChildren(),
      state: (state) => { $('children').dataset.live = state; },
      fallback: refreshChildren,
    });
    refresh();
    return () => { etag = null; refresh(); restartSelf(); restartChildren(); };
  }

  // ---- start ----

  function start() {
    renderLegend();
    showTokenStatus();
    startClock();
    let refresh = () => {};
    // A new token may do other things: ask again, then redraw.
    const reload = async () => {
      await loadWhoami();
      if (actionSession) renderActions(actionSession);
      refresh();
    };
    loadWhoami().then(() => { if (actionSession) renderActions(actionSession); });
    $('token-form').addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = $('token-input').value.trim();
      $('token-input').value = '';
      try { if (v) sessionStorage.setItem(TOKEN_KEY, v); } catch (e) { /* storage off: nothing kept */ }
      showTokenStatus();
      alertBox('');
      reload();
    });
    $('token-forget').addEventListener('click', () => {
      try { sessionStorage.removeItem(TOKEN_KEY); } catch (e) { /* nothing kept */ }
      showTokenStatus();
      reload();
    });
    const p = location.pathname;
    const m = /^\/ui\/sessions\/([^/]+)$/.exec(p);
    if (m) {
      let id = '';
      try { id = decodeURIComponent(m[1]); } catch (e) { id = m[1]; }
      refresh = startSession(id);
    } else {
      refresh = startBoard();
    }
  }

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', start);
  else start();
})();
