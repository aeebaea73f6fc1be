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
    // Only a visible tab holds its event stream: a browser allows six connections per host and port, so six open
    // tabs each holding one would leave a seventh unable to load and the others unable to fetch. A tab shown again
    // opens a new stream, and the page reads what changed meanwhile (onLive(true) after false refreshes it).
    let es: EventSource | null = null;
    const open = () => {
      const stream = new EventSource('api/events');
      stream.addEventListener('hello', () => onLive(true));
      stream.addEventListener('open', () => onLive(true));
      stream.addEventListener('error', () => onLive(false));
      stream.addEventListener('change', (e) => {
        try { onChange(JSON.parse((e as MessageEvent<string>).data) as Change); } catch { /* a torn frame: the next one */ }
      });
      return stream;
    };
    const follow = () => {
      if (document.hidden) {
        es?.close();
        if (es) onLive(false);
        es = null;
      } else {
        es ??= open();
      }
    };
    document.addEventListener('visibilitychange', follow);
    follow();
  },
};

new Dashboard(http).start();
