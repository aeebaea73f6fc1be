// The dashboard as an MCP App: the same page inside the host's frame, its data from this server's `dashboard` tool
// and its actions from the `cancel` and `dismiss` tools, all through the host bridge (@modelcontextprotocol/ext-apps).
// A host's frame cannot hold a server-sent event stream, so the page asks again every few seconds while it is shown.
import { App } from '@modelcontextprotocol/ext-apps';
import type { ActionResult, Backend, ListPage, OutputTail, RunDetail } from './types.js';
import { Dashboard } from './view.js';

const POLL_MS = 2000;
const app = new App({ name: 'subagents-dashboard', version: '1.0.0' });

interface ToolAnswer { isError?: boolean; structuredContent?: Record<string, unknown>; content?: Array<{ type: string; text?: string }> }

const textOf = (r: ToolAnswer) => r.content?.find((c) => c.type === 'text')?.text ?? '';

async function call<T>(name: string, args: Record<string, unknown>): Promise<T | null> {
  const r = (await app.callServerTool({ name, arguments: args })) as ToolAnswer;
  if (r.isError) {
    if (textOf(r).startsWith('RUN_NOT_FOUND')) return null;
    throw new Error(textOf(r).slice(0, 300));
  }
  return (r.structuredContent ?? null) as T | null;
}

const bridge: Backend = {
  async list(q) {
    const args: Record<string, unknown> = { view: 'list' };
    for (const k of ['state', 'agent', 'q', 'page', 'all'] as const) if (q[k] !== undefined && q[k] !== '') args[k] = q[k];
    const page = await call<ListPage>('dashboard', args);
    if (!page) throw new Error('no answer from the dashboard tool');
    return page;
  },
  detail: (runId) => call<RunDetail>('dashboard', { view: 'run', runId }),
  output: (runId, step, bytes) => call<OutputTail>('dashboard', { view: 'output', runId, step, bytes }),
  async act(runId, action) {
    const r = (await app.callServerTool({ name: action, arguments: { runId } })) as ToolAnswer;
    if (r.isError) {
      const text = textOf(r);
      const code = /^([A-Z_]+):/.exec(text)?.[1] ?? 'ERROR';
      return { error: { code, message: text.replace(/^[A-Z_]+:\s*/, '').slice(0, 300) } };
    }
    return (r.structuredContent ?? {}) as ActionResult;
  },
  subscribe(onChange, onLive) {
    void app.connect().then(() => {
      onLive(true);
      applyTheme(app.getHostContext()?.theme);
      onChange({ runs: [], output: [], all: true });
      setInterval(() => { if (document.visibilityState === 'visible') onChange({ runs: [], output: [], all: true }); }, POLL_MS);
    }, () => onLive(false));
  },
};

function applyTheme(theme: string | undefined): void {
  if (theme === 'light' || theme === 'dark') document.documentElement.dataset.theme = theme;
}
app.onhostcontextchanged = (c) => applyTheme(c.theme);

new Dashboard(bridge).start();
