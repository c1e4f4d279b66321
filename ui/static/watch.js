// Following one lock live through the gateway's watch stream: GET
// /locks/{key} with Accept: text/event-stream (Server-Sent Events; see
// docs/api.md, "Watching"). Click a held lock to follow it.
//
// One stream at a time: each holds a connection, and a browser gives a
// page about six to one gateway, which its reads need too. fetch, not
// EventSource, so the API key travels in a header, never in the URL. The
// stream tells more than the listing can: every extend, and whether a
// lease was released or ran out.
'use strict';

window.lockgwFollow = (() => {
  const MAX_EVENTS = 30;
  const RETRY_MS = 1000;
  let controller = null;

  const $ = (id) => document.getElementById(id);

  function el(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }

  function show(kind, text) {
    const list = $('follow-events');
    const li = el('li');
    li.append(el('span', new Date().toLocaleTimeString() + ' ', 'muted'));
    li.append(el('span', kind, 'kind ' + (kind === 'acquired' || kind === 'extended' ? 'acquired' : kind === 'released' || kind === 'expired' ? 'released' : 'holder')));
    if (text) li.append(el('span', ' ' + text));
    list.prepend(li);
    while (list.children.length > MAX_EVENTS) list.lastChild.remove();
  }

  function describe(event, d) {
    if (event === 'acquired' || event === 'extended') {
      return `fence ${d.fence}${d.owner ? ' by ' + d.owner : ''}, ${(d.ttl_ms / 1000).toFixed(1)} s left`;
    }
    return d.fence ? `fence ${d.fence}${d.owner ? ' by ' + d.owner : ''}` : 'free';
  }

  function escapeKey(key) {
    return key.split('/').map(encodeURIComponent).join('/');
  }

  const sleep = (ms, signal) => new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    signal.addEventListener('abort', () => { clearTimeout(t); resolve(); }, { once: true });
  });

  // follow replaces the key followed; apiKey is the page's, if any.
  async function follow(key, apiKey) {
    stop();
    const mine = new AbortController();
    controller = mine;
    $('follow').hidden = false;
    $('follow-key').textContent = key;
    $('follow-events').replaceChildren();
    let lastId = '';
    while (!mine.signal.aborted) {
      try {
        const headers = { Accept: 'text/event-stream' };
        if (apiKey) headers.Authorization = 'Bearer ' + apiKey;
        if (lastId) headers['Last-Event-ID'] = lastId;
        const r = await fetch('/locks/' + escapeKey(key), { headers, cache: 'no-store', credentials: 'omit', signal: mine.signal });
        const type = r.headers.get('Content-Type') || '';
        if (!r.ok || !type.startsWith('text/event-stream')) {
          show('stopped', `the gateway answered ${r.status} ${type.split(';')[0]}, not a stream`);
          return;
        }
        lastId = await read(r.body, mine.signal, lastId);
      } catch (_) {
        if (mine.signal.aborted) return;
      }
      if (mine.signal.aborted) return;
      show('reconnecting', '');
      await sleep(RETRY_MS, mine.signal);
    }
  }

  // read dispatches the stream's events until it ends; it returns the
  // last event id, for a reconnect to resume from.
  async function read(body, signal, lastId) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    signal.addEventListener('abort', () => reader.cancel().catch(() => {}), { once: true });
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return lastId;
      buf += value.replace(/\r\n?/g, '\n');
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        lastId = dispatch(block, lastId);
      }
    }
  }

  function dispatch(block, lastId) {
    let event = 'message';
    let data = '';
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue; // a heartbeat
      const c = line.indexOf(':');
      const field = c < 0 ? line : line.slice(0, c);
      let v = c < 0 ? '' : line.slice(c + 1);
      if (v.startsWith(' ')) v = v.slice(1);
      if (field === 'event') event = v;
      else if (field === 'data') data += (data ? '\n' : '') + v;
      else if (field === 'id') lastId = v;
    }
    if (data) {
      try {
        show(event, describe(event, JSON.parse(data)));
      } catch (_) {
        show(event, '');
      }
    }
    return lastId;
  }

  function stop() {
    if (controller) controller.abort();
    controller = null;
    $('follow').hidden = true;
  }

  document.addEventListener('DOMContentLoaded', () => {
    $('follow-stop').addEventListener('click', stop);
  });

  return follow;
})();
