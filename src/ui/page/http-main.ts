// The dashboard served by `subagents-mcp ui`: same-origin fetches (the HttpOnly cookie carries the token) and
// server-sent events for changes.
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
    return (await getJson<ListPage>(`/api/runs?${p}`))!;
  },
  detail: (runId) => getJson<RunDetail>(`/api/runs/${encodeURIComponent(runId)}`),
  output: (runId, key, bytes) => getJson<OutputTail>(`/api/runs/${encodeURIComponent(runId)}/output?step=${encodeURIComponent(key)}&bytes=${bytes}`),
  async act(runId, action) {
    const r = await fetch(`/api/runs/${encodeURIComponent(runId)}/${action}`, { method: 'POST', credentials: 'same-origin', headers: { 'Content-Type': 'application/json' }, body: '{}' });
    const text = await r.text();
    try { return JSON.parse(text) as ActionResult; } catch { return { error: { code: String(r.status), message: text.slice(0, 200) } }; }
  },
  subscribe(onChange, onLive) {
    const es = new EventSource('/api/events');
    es.addEventListener('hello', () => onLive(true));
    es.addEventListener('open', () => onLive(true));
    es.addEventListener('error', () => onLive(false));
    es.addEventListener('change', (e) => {
      try { onChange(JSON.parse((e as MessageEvent<string>).data) as Change); } catch { /* a torn frame: the next one */ }
    });
  },
};

new Dashboard(http).start();
