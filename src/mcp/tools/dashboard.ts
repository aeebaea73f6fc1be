import type { ManagerContext } from '../../manager/context.js';
import { isVisible, listVisible, notFound, readMeta } from '../../manager/listing.js';
import { HomeModel, type ListPage } from '../../ui/model.js';
import { RedisModel } from '../../ui/redis-model.js';
import { DASHBOARD_URI } from '../app-resource.js';
import { invalid, parseInput, refusal, success } from '../results.js';
import { DashboardInput, DashboardOutput } from '../schemas.js';
import type { ToolDefinition } from '../tool.js';

/** One view model per session context: ended runs are read once, active ones again at each call. */
const models = new WeakMap<ManagerContext, HomeModel>();
const remoteModels = new WeakMap<ManagerContext, RedisModel>();

/** Distributed mode: the session's runs read from Redis at each call (docs/watch-and-ui.md, "The dashboard over Redis"). */
async function remoteModelOf(ctx: ManagerContext): Promise<RedisModel> {
  let m = remoteModels.get(ctx);
  if (!m) { m = new RedisModel(ctx, 'session'); remoteModels.set(ctx, m); }
  await m.loadRemote();
  return m;
}

function modelOf(ctx: ManagerContext): HomeModel {
  let m = models.get(ctx);
  if (!m) {
    // The session's runs only: any other run answers RUN_NOT_FOUND, as everywhere in this server.
    m = new HomeModel(ctx, {
      runIds: () => listVisible(ctx).map((r) => r.runId),
      allows: (runId) => { const meta = readMeta(ctx, runId); return meta !== null && isVisible(ctx, meta); },
    });
    m.load();
    models.set(ctx, m);
  } else {
    m.sync();
  }
  return m;
}

/** The text for hosts that do not render MCP Apps (and for the model): counts and the newest runs, one line each. */
function fallbackText(page: ListPage): string {
  const counts = new Map<string, number>();
  const rows = page.trees.map((t) => t.run);
  for (const r of rows) counts.set(r.state, (counts.get(r.state) ?? 0) + 1);
  const summary = [...counts].map(([state, n]) => `${n} ${state}`).join(', ');
  const lines = rows.slice(0, 10).map((r) => `- ${r.runId} ${r.state}${r.error && r.state !== 'cancelled' ? ` (${r.error.code})` : ''} ${r.agents.join(',')}${r.label ? ` — ${r.label.slice(0, 80)}` : ''}`);
  return [
    page.total === 0 ? 'No runs in this session yet.' : `${page.total} run tree${page.total === 1 ? '' : 's'} in this session (this page: ${summary}); capacity ${page.gauges.active}/${page.gauges.activeLimit || '∞'} active, agents ${page.gauges.agents}/${page.gauges.agentsLimit}.`,
    ...lines,
    'Hosts that render MCP Apps show this as a live dashboard; elsewhere, status { runId } has the details.',
  ].join('\n');
}

export const dashboardTool: ToolDefinition = {
  name: 'dashboard',
  title: 'Runs dashboard',
  description: "Opens a live dashboard of this session's runs in hosts that render MCP Apps: the run tree with nested runs, gauges, each run's step timeline, evidence, output and events, with cancel and dismiss. Other hosts get a short text summary (use status for details). The dashboard page calls this tool itself with view \"run\" or \"output\".",
  annotations: { title: 'Runs dashboard', readOnlyHint: true, destructiveHint: false, idempotentHint: true, openWorldHint: false },
  // MCP Apps: the host renders this resource for the tool (the second key is the older spelling some hosts read).
  meta: { ui: { resourceUri: DASHBOARD_URI }, 'ui/resourceUri': DASHBOARD_URI },
  input: DashboardInput,
  output: DashboardOutput,
  async handler(args, _extra, env) {
    try {
      const a = parseInput(DashboardInput, args);
      const ctx = env.ctx;
      const remote = ctx.distributed ? await remoteModelOf(ctx) : null;
      const model = remote ?? modelOf(ctx);
      const view = a.view ?? 'list';
      if (view === 'list') {
        const page = model.list({ state: a.state, agent: a.agent, q: a.q, all: a.all, page: a.page });
        return success({ view, sessionId: ctx.sessionId, ...page }, fallbackText(page));
      }
      if (!a.runId) throw invalid(`view "${view}" needs runId. Call dashboard {} for the list.`);
      if (view === 'run') {
        const d = remote ? await remote.detailRemote(a.runId) : model.detail(a.runId);
        if (!d) throw notFound(a.runId);
        return success({ view, sessionId: ctx.sessionId, ...d }, `run ${d.run.runId} ${d.run.state}; status { runId } has the same in full.`);
      }
      if (!a.step) throw invalid('view "output" needs step (a step key such as "0" or "2.1").');
      const tail = remote ? await remote.outputTailRemote(a.runId, a.step, a.bytes ?? 16 * 1024) : model.outputTail(a.runId, a.step, a.bytes ?? 16 * 1024);
      if (!tail) throw notFound(a.runId);
      return success({ view, sessionId: ctx.sessionId, ...tail }, `the last ${tail.text.length} characters of step ${tail.key}'s output (${tail.bytes} bytes in all); the whole output is the resource subagents://runs/${a.runId}/steps/${tail.key}/output.`);
    } catch (e) {
      return refusal(e, env.ctx.log);
    }
  },
};
