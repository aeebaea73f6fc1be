import { queueSnapshot } from '../manager/capacity.js';
import { damagedRecords, listAll, type RunMeta } from '../manager/listing.js';
import { freshStatus } from '../manager/run-status.js';
import type { ManagerContext } from '../manager/context.js';
import { listedError, UNREADABLE_STATE } from '../manager/status-view.js';
import { TERMINAL_RUN_STATES, type RunStatus } from '../store/run-types.js';
import { CliError, EXIT_USAGE } from './context.js';
import { formatAge, formatDuration, oneLine, table } from '../format.js';

export interface RunRow {
  runId: string;
  sessionId: string;
  state: string;
  mode: string;
  agents: string[];
  label: string | null;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  durationMs: number | null;
  depth: number;
  parentRunId: string | null;
  rootRunId: string;
  dismissed: boolean;
  error: { code: string; message: string } | null;
  /** While queued: its place in the queue and the queue's length. */
  queue?: { position: number; length: number };
}

const STATE_WORDS = ['queued', 'starting', 'running', 'completed', 'failed', 'cancelled', 'active', 'terminal'];

export function durationOf(createdAt: string, s: Pick<RunStatus, 'startedAt' | 'endedAt'> | null, now = Date.now()): number | null {
  if (!s) return null;
  const start = Date.parse(s.startedAt ?? createdAt);
  if (s.endedAt) return Date.parse(s.endedAt) - start;
  return s.startedAt ? now - start : null;
}

/** One row per run: reconciled first (a run whose runner died is shown as the failure it is, not as running). */
export async function rowOf(ctx: ManagerContext, m: RunMeta): Promise<RunRow> {
  let s: RunStatus | null = null;
  let error: RunRow['error'] = null;
  try {
    s = await freshStatus(ctx, m.runId);
    error = listedError(s.error);
  } catch (e) {
    error = { code: 'STATE_CORRUPT', message: (e as Error).message };
  }
  return {
    runId: m.runId, sessionId: m.sessionId, state: s?.state ?? UNREADABLE_STATE, mode: m.mode, agents: m.agents, label: m.label,
    createdAt: m.createdAt, startedAt: s?.startedAt ?? null, endedAt: s?.endedAt ?? null, durationMs: durationOf(m.createdAt, s),
    depth: m.depth, parentRunId: m.parentRunId, rootRunId: m.rootRunId, dismissed: ctx.store.isDismissed(m.runId), error,
    ...(s?.state === 'queued' ? queuePlace(ctx, m.runId) : {}),
  };
}

export interface RunsOptions { json?: boolean; state?: string; session?: string; all?: boolean }

export async function runsCommand(ctx: ManagerContext, o: RunsOptions, out: (s: string) => void): Promise<number> {
  const wanted = o.state ? o.state.split(',').map((w) => w.trim().toLowerCase()).filter(Boolean) : null;
  for (const w of wanted ?? []) {
    if (!STATE_WORDS.includes(w)) throw new CliError(`--state ${JSON.stringify(w)} is not one of ${STATE_WORDS.join(', ')}`, EXIT_USAGE);
  }
  const stateMatches = (state: string) => !wanted || wanted.some((w) => w === state
    || (w === 'active' && (state === 'queued' || state === 'starting' || state === 'running'))
    || (w === 'terminal' && ((TERMINAL_RUN_STATES as readonly string[]).includes(state) || state === UNREADABLE_STATE)));
  const all = listAll(ctx);
  const byId = new Map(all.map((m) => [m.runId, m]));
  // A nested run belongs to the session of its tree's root as well (its own session is its agent's server's).
  const inSession = (m: RunMeta, want: string) => [m.sessionId, byId.get(m.rootRunId)?.sessionId]
    .some((id) => id !== undefined && id.startsWith(want));
  const metas = all.filter((m) => !o.session || inSession(m, o.session));
  const rows: RunRow[] = [];
  for (const m of metas) {
    if (!o.all && ctx.store.isDismissed(m.runId)) continue;
    const row = await rowOf(ctx, m);
    if (stateMatches(row.state)) rows.push(row);
  }
  // Runs whose record is damaged have no session, shape or age to filter on: shown unless a session is asked for.
  if (!o.session) {
    for (const d of damagedRecords(ctx)) {
      const at = new Date(d.changedAt).toISOString();
      const row: RunRow = {
        runId: d.runId, sessionId: '?', state: UNREADABLE_STATE, mode: '?', agents: [], label: null, createdAt: at, startedAt: null,
        endedAt: null, durationMs: null, depth: 0, parentRunId: null, rootRunId: d.runId, dismissed: ctx.store.isDismissed(d.runId),
        error: { code: 'STATE_CORRUPT', message: d.problem },
      };
      if ((o.all || !row.dismissed) && stateMatches(row.state)) rows.push(row);
    }
    rows.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
  }
  if (o.json) {
    out(JSON.stringify({ home: ctx.settings.home, runs: rows }, null, 2));
    return 0;
  }
  if (rows.length === 0) {
    out(metas.length === 0 ? `no runs in ${ctx.settings.home}` : 'no runs match (dismissed runs are shown with --all)');
    return 0;
  }
  const now = Date.now();
  out(table(['RUN', 'STATE', 'AGENTS', 'AGE', 'DURATION', 'SESSION', 'LABEL'], rows.map((r) => [
    r.runId,
    `${r.state}${r.queue ? ` ${r.queue.position}/${r.queue.length}` : ''}${r.error && r.state !== 'cancelled' ? ` (${r.error.code})` : ''}${r.dismissed ? ' [dismissed]' : ''}`,
    oneLine(`${r.mode === 'single' || r.agents.length === 0 ? '' : `${r.mode}: `}${r.agents.join(',')}`, 32),
    formatAge(r.createdAt, now),
    formatDuration(r.durationMs),
    r.depth > 0 ? `in ${r.parentRunId?.slice(0, 12)}…` : `${r.sessionId.slice(0, 12)}…`,
    r.label ? oneLine(r.label, 40) : '',
  ])));
  return 0;
}

function queuePlace(ctx: ManagerContext, runId: string): { queue?: { position: number; length: number } } {
  const q = queueSnapshot(ctx, runId);
  return q ? { queue: q } : {};
}
