import fs from 'node:fs';
import { SubagentError } from '../errors.js';
import { isTerminalRun, type RunStatus } from '../store/run-types.js';
import { capacitySnapshot } from './capacity.js';
import type { ManagerContext } from './context.js';
import { listVisible, requireVisible, type RunMeta } from './listing.js';
import { reconcileRun } from './reconcile.js';
import { countPendingAppends, renderRun, summarize, type RunSummary, type RunView } from './status-view.js';

export interface StatusQuery {
  runId?: string;
  waitMs?: number;
  until?: 'change' | 'terminal';
  all?: boolean;
  outputBytes?: number;
}

export interface WaitInfo { waitedMs: number; changed: boolean }

export type StatusAnswer =
  | ({ kind: 'run' } & RunView & Partial<WaitInfo>)
  | ({ kind: 'list'; sessionId: string; runs: RunSummary[]; omitted?: number; capacity: { active: number; limit: number } } & Partial<WaitInfo>);

/** Runs a list answer carries inline (a summary is ~400 bytes: well under the 256 KiB inline cap). */
export const LIST_MAX_RUNS = 200;

/** Reads a status, reconciling it first if its runner is gone (SPEC §6: listings reconcile what they return). */
export async function freshStatus(ctx: ManagerContext, runId: string): Promise<RunStatus> {
  let s = ctx.store.readStatus(runId);
  if (s && !isTerminalRun(s.state)) {
    await reconcileRun(ctx, runId);
    s = ctx.store.readStatus(runId);
  }
  if (!s) throw new SubagentError('STATE_CORRUPT', `status.json of ${runId} is missing; the run's files were damaged or removed.`);
  return s;
}

/** What a waiter compares: run state, step states, pending appends. */
function fingerprint(ctx: ManagerContext, runId: string): string {
  try {
    const s = ctx.store.readStatus(runId);
    const r = ctx.store.readRecord(runId);
    if (!s || !r) return 'missing';
    const steps = s.steps.map((st) => `${st.state}${st.members ? `[${st.members.map((m) => m.state).join(',')}]` : ''}`).join('|');
    return `${s.state}/${steps}/${countPendingAppends(r, s, ctx.store.readAppends(runId))}`;
  } catch {
    return 'corrupt';
  }
}

function listFingerprint(ctx: ManagerContext, metas: RunMeta[]): string {
  return metas.map((m) => `${m.runId}=${fingerprint(ctx, m.runId)}`).join(';');
}

/**
 * Blocks until `probe()` differs from `initial`, `done()` holds, time is up or the client cancels. Event-driven: a
 * watch on each directory that matters, with a 1 s poll behind it that also reconciles (a dead runner writes nothing).
 */
async function waitUntil(dirs: string[], waitMs: number, signal: AbortSignal, check: () => Promise<boolean>, onTick?: (elapsedMs: number) => void): Promise<WaitInfo> {
  const start = performance.now();
  if (await check()) return { waitedMs: 0, changed: true };
  return new Promise<WaitInfo>((resolve) => {
    let done = false;
    const watchers: fs.FSWatcher[] = [];
    let checking = false;
    let again = false;
    const finish = (changed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearInterval(poll);
      clearInterval(progress);
      for (const w of watchers) w.close();
      signal.removeEventListener('abort', onAbort);
      resolve({ waitedMs: Math.round(performance.now() - start), changed });
    };
    const run = async () => {
      if (done) return;
      if (checking) { again = true; return; }
      checking = true;
      try {
        if (await check()) finish(true);
      } finally {
        checking = false;
        if (again && !done) { again = false; void run(); }
      }
    };
    const onAbort = () => finish(false);
    const timer = setTimeout(() => finish(false), waitMs);
    const poll = setInterval(() => void run(), 1000);
    const progress = setInterval(() => onTick?.(performance.now() - start), 5000);
    signal.addEventListener('abort', onAbort, { once: true });
    for (const d of dirs) {
      try {
        const w = fs.watch(d, () => void run());
        w.on('error', () => {});
        watchers.push(w);
      } catch { /* poll covers it */ }
    }
  });
}

export async function getStatus(ctx: ManagerContext, q: StatusQuery, o: { signal: AbortSignal; onProgress?: (elapsedMs: number, message: string) => void }): Promise<StatusAnswer> {
  const waitMs = Math.min(q.waitMs ?? 0, ctx.settings.maxWaitMs);
  if (q.runId !== undefined) {
    const runId = q.runId;
    requireVisible(ctx, runId);
    let info: WaitInfo | undefined;
    const initial = await freshStatus(ctx, runId);
    if (waitMs > 0) {
      const before = fingerprint(ctx, runId);
      info = isTerminalRun(initial.state)
        ? { waitedMs: 0, changed: false }
        : await waitUntil([ctx.store.paths(runId).dir], waitMs, o.signal, async () => {
          const s = await freshStatus(ctx, runId);
          if (q.until === 'terminal') return isTerminalRun(s.state);
          return isTerminalRun(s.state) || fingerprint(ctx, runId) !== before;
        }, (ms) => o.onProgress?.(ms, `waiting on ${runId}`));
    }
    const record = ctx.store.readRecord(runId)!;
    const status = await freshStatus(ctx, runId);
    return { kind: 'run', ...renderRun(ctx, record, status, q.outputBytes), ...(info ?? {}) };
  }
  const list = async (): Promise<RunMeta[]> => {
    const metas = listVisible(ctx).filter((m) => ctx.visibleSessions().has(m.sessionId));
    return q.all ? metas : metas.filter((m) => !ctx.store.isDismissed(m.runId));
  };
  let metas = await list();
  let info: WaitInfo | undefined;
  if (waitMs > 0) {
    const anyActive = async () => {
      for (const m of metas) {
        const s = await freshStatus(ctx, m.runId).catch(() => null);
        if (s && !isTerminalRun(s.state)) return true;
      }
      return false;
    };
    if (!(await anyActive())) {
      info = { waitedMs: 0, changed: false };
    } else {
      const before = listFingerprint(ctx, metas);
      const dirs = [ctx.layout.runsDir, ...metas.map((m) => ctx.store.paths(m.runId).dir)];
      info = await waitUntil(dirs, waitMs, o.signal, async () => {
        const now = await list();
        for (const m of now) await freshStatus(ctx, m.runId).catch(() => null);
        return listFingerprint(ctx, now) !== before;
      }, (ms) => o.onProgress?.(ms, 'waiting on the session\'s runs'));
      metas = await list();
    }
  }
  const runs: RunSummary[] = [];
  // The newest runs inline, the rest counted: a session with thousands of runs must not answer with megabytes
  // (resources/list pages through all of them).
  const omitted = Math.max(0, metas.length - LIST_MAX_RUNS);
  for (const m of metas.slice(0, LIST_MAX_RUNS)) {
    let s: RunStatus | null = null;
    try { s = await freshStatus(ctx, m.runId); } catch { s = null; }
    runs.push(summarize(ctx, m.runId, s));
  }
  return { kind: 'list', sessionId: ctx.sessionId, runs, ...(omitted ? { omitted } : {}), capacity: capacitySnapshot(ctx), ...(info ?? {}) };
}
