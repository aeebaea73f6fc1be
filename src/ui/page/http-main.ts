// The dashboard served by `subagents-mcp ui`: same-origin fetches (the HttpOnly cookie carries the token) and
// server-sent events for changes. Every URL is relative: the page lives under its server's secret path, the only
// path its cookie is sent to.
import type { ActionResult, Backend, Change, ListPage, ListQuery, OutputTail, RunDetail } from './types.js';
import { Dashboard } from './view.js';

async function getJson<T>(url: string): Promise<T | null> {
  const r = await fetch(url, { credentials: 'same-origin', headers: { Accept: 'application/json' } });
  if (r.status === 404) return null;
  if (!r.ok) throw new Error(`${r.status} ${(await r.text()).slice(0, 200)}`);
  return (await r.json()) as T;
}

const http: Backend = {
  async list(q: ListQuery) {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(q)) if (v !== undefined && v !== '' && v !== false) p.set(k, v === true ? '1' : String(v));
    return (await getJson<ListPage>(`api/runs?${p}`))!;
  },
  detail: (runId) => getJson<RunDetail>(`api/runs/${encodeURIComponent(runId)}`),
  output: (runId, key, bytes) => getJson<OutputTail>(`api/runs/${encodeURIComponent(runId)}/output?step=${encodeURIComponent(key)}&bytes=${bytes}`),
  async act(runId, action) {
    const r = await fetch(`api/runs/${encodeURIComponent(runId)}/${action}`, { method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    const text = await r.text();
    try { return JSON.parse(text) as ActionResult; } catch { return { error: { code: String(r.status), message: text.slice(0, 200) } }; }
  },
  subscribe(onChange, onLive) {
    // One event stream per browser for all tabs of this dashboard: a browser allows six connections per host and
    // port, so six tabs each holding a stream would leave a seventh unable to load and the others unable to fetch.
    // The tab holding the Web Lock keeps the stream and passes its messages to the others on a BroadcastChannel; when
    // it closes, the lock goes to another tab, which opens the stream anew (and every tab reads what changed since).
    const name = `subagents-ui:${location.pathname}`;
    const channel = new BroadcastChannel(name);
    let leading = false;
    let live = false;
    const setLive = (v: boolean) => { live = v; onLive(v); };
    channel.onmessage = (m: MessageEvent<{ kind: string; change?: Change; live?: boolean }>) => {
      const msg = m.data;
      if (msg.kind === 'change' && msg.change) onChange(msg.change);
      else if (msg.kind === 'live') setLive(msg.live === true);
      else if (msg.kind === 'ask' && leading) channel.postMessage({ kind: 'live', live });
    };
    const lead = () => new Promise<never>(() => {
      leading = true;
      const say = (v: boolean) => { setLive(v); channel.postMessage({ kind: 'live', live: v }); };
      say(false); // the tabs read again once this stream says hello: changes between two leaders are not lost
      const es = new EventSource('api/events');
      es.addEventListener('hello', () => say(true));
      es.addEventListener('open', () => say(true));
      es.addEventListener('error', () => say(false));
      es.addEventListener('change', (e) => {
        let change: Change;
        try { change = JSON.parse((e as MessageEvent<string>).data) as Change; } catch { return; } // a torn frame: the next one
        onChange(change);
        channel.postMessage({ kind: 'change', change });
      });
    });
    if ('locks' in navigator) void navigator.locks.request(name, lead);
    else void lead(); // no Web Locks: a stream of its own
    channel.postMessage({ kind: 'ask' });
  },
};

new Dashboard(http).start();
