// The lockgateway dashboard: reads GET /locks and GET /readyz from the
// gateway that served it and redraws itself. No library, no build step.
//
// Safety: every value from the gateway goes into the page as text
// (textContent), never as HTML, so an owner label cannot inject markup;
// the Content-Security-Policy forbids inline scripts besides. The API key,
// when the gateway asks for one, lives in one variable of this page: it
// is never stored (no cookie, no localStorage), never put in a URL, and
// sent only to this gateway, in the Authorization header of the calls
// that need it: the listings, GET /whoami, a followed lock's stream and a
// forced release.
//
// A forced release (docs/api.md, "Releasing a lease by force") is offered
// only on the keys the page's API key administers, as GET /whoami tells
// it: a "release" button on each such lock and permit, which asks first.
// The gateway decides all the same; the page only spares a key without
// the role a button that would be refused.
'use strict';

(() => {
  // One page of at most this many locks: the dashboard shows the first
  // page of the prefix and says when there is more.
  const LIST_LIMIT = 1000;
  // A listing reads every key the backend holds (docs/api.md, "Listing
  // locks"), so the page reads again 500 ms after an answer, or four times
  // as long as the last listing took: an open dashboard costs the backend
  // at most a fifth of its time however large the keyspace. Capped at 5 s.
  const MIN_LIST_EVERY = 500;
  const MAX_LIST_EVERY = 5000;
  const READY_EVERY = 1000;
  const METRICS_EVERY = 2000;
  const RATE_WINDOW_MS = 60000;
  const MAX_EVENTS = 50;
  const LOW_TTL_MS = 5000;

  let apiKey = '';
  let prefix = '';
  let generation = 0; // bumped when the prefix or key changes: late answers are dropped
  let listTimer = 0;
  let locks = new Map(); // key → {item, readAt}
  let sems = new Map(); // key → {item, readAt}
  let semsServed = true; // false once GET /semaphores answers 404 (no semaphores here)
  let listed = false; // a first listing of this prefix arrived: changes after it are events
  let lastRead = 0;
  let nodesSeen = new Map(); // addr → state
  let backendName = '';
  let rateSamples = []; // {at, counts: {decision: total}} from /metrics
  // What the page's key administers (GET /whoami "admin_prefixes"): every
  // key, or those starting with one of adminPrefixes. Nothing until the
  // gateway says otherwise, and nothing without API keys.
  let adminAll = false;
  let adminPrefixes = [];
  let accessGen = 0; // bumped when the key changes: a late /whoami is dropped
  let pendingForce = null; // {kind, key, fence, owner} the dialog asks about

  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  async function getJSON(path, withKey) {
    const headers = { Accept: 'application/json' };
    if (withKey && apiKey) headers.Authorization = 'Bearer ' + apiKey;
    const r = await fetch(path, { headers, cache: 'no-store', credentials: 'omit' });
    let body = null;
    try {
      body = await r.json();
    } catch (_) {
      body = null;
    }
    return { status: r.status, body };
  }

  function showMessage(text) {
    const m = $('message');
    m.textContent = text;
    m.hidden = text === '';
  }

  function fmtLeft(ms) {
    if (ms <= 0) return 'expired';
    if (ms < 60000) return (ms / 1000).toFixed(1) + ' s';
    const s = Math.floor(ms / 1000);
    const h = Math.floor(s / 3600);
    const m = Math.floor((s % 3600) / 60);
    const ss = String(s % 60).padStart(2, '0');
    return h > 0 ? `${h}:${String(m).padStart(2, '0')}:${ss}` : `${m}:${ss}`;
  }

  function event(kind, cls, text) {
    const list = $('events');
    const li = el('li');
    li.append(el('span', new Date().toLocaleTimeString() + ' ', 'muted'));
    li.append(el('span', kind, 'kind ' + cls));
    li.append(el('span', ' ' + text));
    list.prepend(li);
    while (list.children.length > MAX_EVENTS) list.lastChild.remove();
  }

  // --- locks ---

  async function pollLocks() {
    const gen = generation;
    if (document.hidden) {
      // Nobody looks: spare the backend its listing until somebody does.
      listTimer = setTimeout(pollLocks, MIN_LIST_EVERY);
      return;
    }
    const started = performance.now();
    try {
      const q = new URLSearchParams({ limit: String(LIST_LIMIT) });
      if (prefix) q.set('prefix', prefix);
      const [res, semRes] = await Promise.all([
        getJSON('/locks?' + q.toString(), true),
        semsServed ? getJSON('/semaphores?' + q.toString(), true) : null,
      ]);
      if (gen !== generation) return; // a newer poll was started for the new prefix or key
      const { status, body } = res;
      if (status === 200 && body && Array.isArray(body.items)) {
        applyLocks(body, started);
        showMessage('');
      } else if (status === 401) {
        showMessage('This gateway needs an API key: enter it above.');
      } else if (status === 403) {
        showMessage('Your API key may list only inside its prefixes: enter one of them as the prefix.');
      } else {
        showMessage((body && body.detail) || `The listing answered ${status}.`);
      }
      if (semRes && semRes.status === 404) {
        semsServed = false;
      } else if (semRes && semRes.status === 200 && semRes.body && Array.isArray(semRes.body.items)) {
        applySems(semRes.body, started);
      }
      $('semaphores-section').hidden = !semsServed;
    } catch (_) {
      if (gen !== generation) return;
      showMessage('The gateway does not answer.');
    }
    const took = performance.now() - started;
    const wait = Math.min(MAX_LIST_EVERY, Math.max(MIN_LIST_EVERY, 4 * took));
    listTimer = setTimeout(pollLocks, wait);
  }

  // --- what the page's key may do: GET /whoami ---

  async function loadAccess() {
    const gen = ++accessGen;
    adminAll = false;
    adminPrefixes = [];
    document.body.dataset.access = 'asking'; // 'known' once answered, for tests
    let all = false;
    let prefixes = [];
    try {
      const { status, body } = await getJSON('/whoami', true);
      // 401 without a key (or a wrong one), 404 from a gateway without
      // /whoami: no role, no button.
      if (status === 200 && body && Array.isArray(body.admin_prefixes)) {
        const list = body.admin_prefixes.filter((p) => typeof p === 'string' && p !== '');
        all = list.length === 1 && list[0] === '*';
        prefixes = all ? [] : list;
      }
    } catch (_) {
      // The gateway does not answer: the listing says so.
    }
    if (gen !== accessGen) return;
    adminAll = all;
    adminPrefixes = prefixes;
    render();
    renderSems();
    document.body.dataset.access = 'known';
  }

  function mayForce() {
    return adminAll || adminPrefixes.length > 0;
  }

  function administers(key) {
    return adminAll || adminPrefixes.some((p) => key.startsWith(p));
  }

  function restartLocks() {
    generation++;
    clearTimeout(listTimer);
    locks = new Map();
    sems = new Map();
    renderSems();
    listed = false;
    render();
    pollLocks();
  }

  function applyLocks(body, readAt) {
    const next = new Map();
    for (const item of body.items) {
      const prev = locks.get(item.key);
      if (listed && !prev) {
        event('acquired', 'acquired', `${item.key} fence ${item.fence}${item.owner ? ' by ' + item.owner : ''}`);
      } else if (listed && prev.item.fence !== item.fence) {
        event('new holder', 'holder', `${item.key} fence ${prev.item.fence} → ${item.fence}`);
      }
      next.set(item.key, { item, readAt, fresh: listed && !prev });
    }
    if (listed) {
      for (const [key, prev] of locks) {
        if (next.has(key)) continue;
        const left = prev.item.ttl_ms - (readAt - prev.readAt);
        // Gone before its TTL ran out: someone released it. (A lock past
        // the TTL this page last read may have been extended and released
        // since; the page cannot tell, and says expired.)
        if (left > 0) event('released', 'released', `${key} fence ${prev.item.fence}`);
        else event('expired', 'released', `${key} fence ${prev.item.fence}`);
      }
    }
    locks = next;
    listed = true;
    lastRead = performance.now();
    render();
    const more = $('more');
    more.hidden = !body.next;
    more.textContent = body.next ? `More locks are held under this prefix than the ${LIST_LIMIT} shown: narrow the prefix.` : '';
  }

  // streamMark marks a lease a hold's stream on this gateway keeps
  // (held_by_stream): the gateway renews it for as long as the stream is
  // open, so its short TTL is no sign that it is about to go. Holds through
  // other gateways are not marked: the listing's gateway knows its own only.
  function streamMark() {
    const mark = el('span', 'stream', 'stream-mark');
    mark.title = 'held by a stream on this gateway: renewed until its connection closes';
    return mark;
  }

  function render() {
    const tbody = $('locks').tBodies[0];
    const focused = focusedForce(tbody);
    const rows = [];
    for (const { item, readAt, fresh } of locks.values()) {
      const tr = el('tr', undefined, fresh ? 'new' : '');
      tr.dataset.key = item.key;
      const key = el('td', item.key, 'key');
      if (item.held_by_stream) key.append(streamMark());
      tr.append(key);
      tr.append(el('td', item.owner || ''));
      tr.append(el('td', String(item.fence), 'num'));
      const ttl = el('td', '', 'num ttl');
      ttl.dataset.ttl = String(item.ttl_ms);
      ttl.dataset.readAt = String(readAt);
      if (item.held_by_stream) ttl.dataset.renewed = 'true';
      tr.append(ttl);
      tr.append(el('td', String(item.waiters), 'num'));
      if (mayForce()) {
        const td = el('td', undefined, 'force');
        if (administers(item.key)) td.append(forceButton('lock', item.key, item.fence, item.owner));
        tr.append(td);
      }
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
    refocusForce(tbody, focused);
    $('locks').tHead.querySelector('th.force').hidden = !mayForce();
    $('count').textContent = listed ? `(${locks.size})` : '';
    tick();
  }

  // --- semaphores: GET /semaphores, read with the locks ---

  function applySems(body, readAt) {
    const next = new Map();
    for (const item of body.items) {
      const prev = sems.get(item.key);
      const fences = new Set(item.holders.map((h) => h.fence));
      if (listed) {
        const before = prev ? new Set(prev.item.holders.map((h) => h.fence)) : new Set();
        for (const h of item.holders) {
          if (!before.has(h.fence)) event('permit', 'acquired', `${item.key} fence ${h.fence}${h.owner ? ' by ' + h.owner : ''} (${item.held} of ${item.limit})`);
        }
        for (const f of before) {
          if (!fences.has(f)) event('permit gone', 'released', `${item.key} fence ${f}`);
        }
      }
      next.set(item.key, { item, readAt, fresh: listed && !prev });
    }
    if (listed) {
      for (const [key, prev] of sems) {
        if (!next.has(key)) {
          for (const h of prev.item.holders) event('permit gone', 'released', `${key} fence ${h.fence}`);
        }
      }
    }
    sems = next;
    renderSems();
    const more = $('sem-more');
    more.hidden = !body.next;
    more.textContent = body.next ? `More semaphores are held under this prefix than the ${LIST_LIMIT} shown: narrow the prefix.` : '';
  }

  function renderSems() {
    const tbody = $('semaphores').tBodies[0];
    const focused = focusedForce(tbody);
    const rows = [];
    for (const { item, readAt, fresh } of sems.values()) {
      const tr = el('tr', undefined, fresh ? 'new' : '');
      tr.dataset.key = item.key;
      tr.append(el('td', item.key, 'key'));
      tr.append(el('td', `${item.held} of ${item.limit}`, 'num'));
      const holders = el('td');
      item.holders.forEach((h, i) => {
        const holder = el('span', `${i > 0 ? ', ' : ''}${h.owner || '—'} (${h.fence})`, 'holder');
        if (h.held_by_stream) holder.append(streamMark());
        holders.append(holder);
        if (administers(item.key)) holders.append(' ', forceButton('permit', item.key, h.fence, h.owner));
      });
      tr.append(holders);
      // A permit a stream holds does not free itself: the first to go is
      // among the others, if any.
      const ending = item.holders.filter((h) => !h.held_by_stream);
      const ttl = el('td', '', 'num ttl');
      ttl.dataset.ttl = String(Math.min(...(ending.length ? ending : item.holders).map((h) => h.ttl_ms)));
      ttl.dataset.readAt = String(readAt);
      if (ending.length === 0) ttl.dataset.renewed = 'true';
      tr.append(ttl);
      tr.append(el('td', String(item.waiters), 'num'));
      rows.push(tr);
    }
    tbody.replaceChildren(...rows);
    refocusForce(tbody, focused);
    $('sem-count').textContent = sems.size ? `(${sems.size})` : '';
    tick();
  }

  // The TTL counts down between reads from what the last read said.
  function tick() {
    const now = performance.now();
    for (const td of document.querySelectorAll('td.ttl')) {
      const left = Number(td.dataset.ttl) - (now - Number(td.dataset.readAt));
      td.textContent = fmtLeft(left);
      td.classList.toggle('low', left > 0 && left < LOW_TTL_MS && !td.dataset.renewed);
      td.classList.toggle('gone', left <= 0);
    }
    $('updated').textContent = lastRead ? `read ${((now - lastRead) / 1000).toFixed(1)} s ago` : '';
  }

  // --- forced release: DELETE ?force=true&fence=N ---

  // forceButton is the button that offers to release one lease (kind
  // 'lock') or permit ('permit') by force; it names the lease its row
  // shows, by fence, so a lease that replaced it is never released.
  function forceButton(kind, key, fence, owner) {
    const b = el('button', 'release', 'force');
    b.type = 'button';
    b.setAttribute('aria-label', `Release the ${kind} ${key} (fence ${fence}) by force`);
    b.dataset.kind = kind;
    b.dataset.key = key;
    b.dataset.fence = String(fence);
    b.dataset.owner = owner || '';
    return b;
  }

  // The tables are redrawn on every read: a button that had the focus
  // gets it back in the new rows, so that a keyboard does not lose it.
  function focusedForce(tbody) {
    const a = document.activeElement;
    return a && a.matches('button.force') && tbody.contains(a) ? { ...a.dataset } : null;
  }

  function refocusForce(tbody, d) {
    if (!d) return;
    const b = Array.from(tbody.querySelectorAll('button.force')).find((x) =>
      x.dataset.kind === d.kind && x.dataset.key === d.key && x.dataset.fence === d.fence);
    if (b) b.focus();
  }

  function askForce(button) {
    const d = button.dataset;
    pendingForce = { kind: d.kind, key: d.key, fence: d.fence, owner: d.owner };
    const what = d.kind === 'permit' ? 'the permit of fence ' + d.fence + ' of the semaphore' : 'the lock';
    $('force-text').textContent = `Release ${what} ${d.key}${d.kind === 'lock' ? ' (fence ' + d.fence + ')' : ''}` +
      `${d.owner ? ', held by ' + d.owner : ''}, without its token?`;
    $('force-dialog').showModal();
  }

  function showForceResult(ok, text) {
    const p = $('force-result');
    p.textContent = `${new Date().toLocaleTimeString()} ${text}`;
    p.className = 'result ' + (ok ? 'ok' : 'bad');
    p.hidden = false;
  }

  async function forceRelease(t) {
    const path = (t.kind === 'permit' ? '/semaphores/' : '/locks/') + escapeKey(t.key) +
      '?force=true&fence=' + encodeURIComponent(t.fence);
    const headers = { Accept: 'application/json, application/problem+json' };
    if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
    const what = `${t.kind} ${t.key} (fence ${t.fence})`;
    let r;
    try {
      r = await fetch(path, { method: 'DELETE', headers, cache: 'no-store', credentials: 'omit' });
    } catch (_) {
      showForceResult(false, `Not released: the gateway does not answer (${what}).`);
      return;
    }
    if (r.status === 204) {
      showForceResult(true, `Released the ${what}.`);
      event('forced', 'holder', `${t.key} fence ${t.fence}`);
      return;
    }
    let problem = null;
    try {
      problem = await r.json();
    } catch (_) {
      problem = null;
    }
    const detail = (problem && (problem.detail || problem.title)) || `the gateway answered ${r.status}`;
    if (r.status === 404) {
      showForceResult(false, `Already gone, nothing released (${what}): ${detail}`);
    } else {
      showForceResult(false, `Not released (${what}, ${r.status}): ${detail}`);
    }
  }

  function escapeKey(key) {
    return key.split('/').map(encodeURIComponent).join('/');
  }

  // --- the backend: /readyz ---

  async function pollReady() {
    try {
      const { status, body } = await getJSON('/readyz', false);
      applyReady(status, body || {});
    } catch (_) {
      applyReady(0, {});
    }
    setTimeout(pollReady, READY_EVERY);
  }

  function applyReady(status, body) {
    const pill = $('ready');
    pill.textContent = status === 200 ? 'ready' : 'not ready';
    pill.className = 'pill ' + (status === 200 ? 'ok' : 'bad');
    if (body.backend) backendName = body.backend + (body.mode ? ` (${body.mode})` : '');
    $('backend-name').textContent = backendName;

    const lines = [];
    if (status !== 200) lines.push(body.detail || 'The gateway does not answer.');
    if (body.master) lines.push(`Sentinel master: ${body.master}`);
    if (typeof body.shards === 'number') lines.push(`Cluster shards up: ${body.shards_up} of ${body.shards}`);
    $('backend').replaceChildren(...lines.map((l) => el('p', l)));

    const nodes = Array.isArray(body.nodes) ? body.nodes : [];
    const table = $('nodes');
    table.hidden = nodes.length === 0 && nodesSeen.size === 0;
    if (nodes.length === 0) return;
    const rows = nodes.map((n) => {
      let state = n.up ? 'up' : 'down';
      if (n.quarantined_until) state = 'quarantined';
      const prev = nodesSeen.get(n.addr);
      if (prev !== undefined && prev !== state) event('node ' + state, state === 'up' ? 'acquired' : 'holder', n.addr);
      nodesSeen.set(n.addr, state);
      const tr = el('tr');
      tr.dataset.addr = n.addr;
      tr.dataset.state = state;
      tr.append(el('td', n.addr, 'key'));
      const detail = state === 'quarantined' ? `quarantined until ${n.quarantined_until}` : state;
      tr.append(el('td', detail, state));
      return tr;
    });
    table.tBodies[0].replaceChildren(...rows);
  }

  // --- the rate limiter's decisions: /metrics ---

  // The decisions of the last minute, from the gateway's counters
  // (lockgw_ratelimit_decisions_total, by decision). /metrics may live on
  // another address (LOCKGW_METRICS_ADDR): then the page asks once.
  async function pollMetrics() {
    let r;
    try {
      r = await fetch('/metrics', { cache: 'no-store', credentials: 'omit' });
    } catch (_) {
      setTimeout(pollMetrics, METRICS_EVERY);
      return;
    }
    if (r.status === 404) {
      $('ratelimit').textContent = 'Its counters are not served here (LOCKGW_METRICS_ADDR).';
      return;
    }
    if (r.ok) applyMetrics(await r.text());
    setTimeout(pollMetrics, METRICS_EVERY);
  }

  function applyMetrics(text) {
    const counts = {};
    for (const line of text.split('\n')) {
      const m = /^lockgw_ratelimit_decisions_total\{decision="([a-z_]+)"\} (\S+)$/.exec(line);
      // A refusal answered from the gateway's cache of full windows
      // (refused_cached) is a refusal all the same.
      if (m) {
        const d = m[1] === 'refused_cached' ? 'refused' : m[1];
        counts[d] = (counts[d] || 0) + Number(m[2]);
      }
    }
    const now = performance.now();
    rateSamples.push({ at: now, counts });
    while (rateSamples.length > 2 && now - rateSamples[1].at >= RATE_WINDOW_MS) rateSamples.shift();
    const decisions = Object.keys(counts).sort();
    const out = $('ratelimit');
    if (decisions.length === 0) {
      out.textContent = 'No decisions: rate limiting is off, or nothing was limited yet.';
      return;
    }
    const base = rateSamples[0];
    const span = Math.round((now - base.at) / 1000);
    const parts = decisions.map((d) => `${d.replace('_', ' ')} ${counts[d] - (base.counts[d] || 0)}`);
    out.textContent = (span > 0 ? `Last ${span} s: ` : 'Since this page opened: ') + parts.join(' · ') +
      ` (in all: ${decisions.map((d) => `${d.replace('_', ' ')} ${counts[d]}`).join(' · ')})`;
  }

  // Events here are the changes this page saw between two listings. The
  // watch stream (GET /locks/{key} with Accept: text/event-stream) follows
  // one key, not a prefix: a click on a lock follows it (watch.js). When
  // the gateway offers a stream over a prefix, connect it here and let its
  // events replace these.

  function start() {
    $('prefix').addEventListener('change', (e) => {
      prefix = e.target.value.trim();
      restartLocks();
    });
    $('key-form').addEventListener('submit', (e) => {
      e.preventDefault();
      const input = $('apikey');
      apiKey = input.value.trim();
      input.value = ''; // out of the DOM: the variable is the only copy
      input.placeholder = apiKey ? 'key in use (this page only)' : 'only if the gateway asks';
      if ($('force-dialog').open) $('force-dialog').close(); // it asked for the old key
      loadAccess();
      restartLocks();
    });
    // A click on a held lock follows it through its watch stream (watch.js);
    // one on its release button asks to release it by force.
    $('locks').addEventListener('click', (e) => {
      const button = e.target.closest('button.force');
      if (button) {
        askForce(button);
        return;
      }
      const tr = e.target.closest('tr[data-key]');
      if (tr) window.lockgwFollow(tr.dataset.key, apiKey);
    });
    $('semaphores').addEventListener('click', (e) => {
      const button = e.target.closest('button.force');
      if (button) askForce(button);
    });
    $('force-dialog').addEventListener('close', () => {
      pendingForce = null;
    });
    $('force-cancel').addEventListener('click', () => $('force-dialog').close());
    $('force-confirm').addEventListener('click', () => {
      const t = pendingForce;
      $('force-dialog').close();
      if (t) forceRelease(t);
    });
    setInterval(tick, 100);
    loadAccess();
    pollReady();
    pollLocks();
    pollMetrics();
  }

  start();
})();
