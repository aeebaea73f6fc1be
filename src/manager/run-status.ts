import { SubagentError } from '../errors.js';
import { isAlive } from '../process/identity.js';
import { watchRunDirs } from './run-files.js';
import type { DirWatch } from '../wait.js';
import { isTerminalRun, type RunStatus } from '../store/run-types.js';
import { capacitySnapshot, releaseStaleRoots } from './capacity.js';
import { handOffNeeded, queuePosition } from '../lifecycle/queue.js';
import { serveQueue } from './queue.js';
import { peekRecord, peekStatus } from './run-peek.js';

/**
 * Repairs the queue before an answer, waiting at most a moment: a hand-off's handshake takes tens of ms, and the
 * answer need not wait for it (its state change wakes a waiting status anyway).
 */
async function serveQueueQuickly(ctx: ManagerContext): Promise<void> {
  // The lock-free look that serveQueue makes first: with nothing to hand off (nearly always) no timer is armed, and
  // the answer does not wait for one.
  if (ctx.nesting || !handOffNeeded(ctx.layout)) return;
  await Promise.race([serveQueue(ctx), new Promise((r) => setTimeout(r, 0))]);
}
import type { ManagerContext } from './context.js';
import { listVisibleRuns, missingRecord, requireVisible, type RunMeta } from './listing.js';
import { reconcileRun, reconcileSettled } from './reconcile.js';
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
  | ({ kind: 'list'; sessionId: string; runs: RunSummary[]; omitted?: number; capacity: { active: number; limit: number; queued: number } } & Partial<WaitInfo>);

/** Runs a list answer carries inline (a summary is ~400 bytes: well under the 256 KiB inline cap). */
export const LIST_MAX_RUNS = 200;

/**
 * Reads a status, reconciling it first if its runner is gone (docs/contract.md, "Run states": listings reconcile what
 * they return). `peek`: the first read goes through `peekStatus` (a caller that only reads the value).
 */
export async function freshStatus(ctx: ManagerContext, runId: string, o: { peek?: boolean } = {}): Promise<RunStatus> {
  let s = o.peek ? peekStatus(ctx, runId).status : ctx.store.readStatus(runId);
  // A running run whose runner lives needs nothing (reconcileRun's own first look, without reading the file twice more).
  if (s && !isTerminalRun(s.state) && !(s.state === 'running' && isAlive(s.runner))) {
    await reconcileRun(ctx, runId);
    s = ctx.store.readStatus(runId);
  }
  if (!s) throw new SubagentError('STATE_CORRUPT', `status.json of ${runId} is missing; the run's files were damaged or removed.`);
  return s;
}

/** What a listing shows of a run's status (`summarize`). */
type ListedStatus = Pick<RunStatus, 'state' | 'endedAt' | 'error'>;
/**
 * The listed part of ended runs' statuses, kept for this process's life: terminal is final (docs/contract.md, invariant 3), so a
 * session's ended runs are read once instead of on every list (200 status files per list in a large session).
 */
const endedListed = new Map<string, ListedStatus>();

async function listedStatus(ctx: ManagerContext, runId: string): Promise<ListedStatus> {
  const known = endedListed.get(runId);
  if (known) return known;
  const s = await freshStatus(ctx, runId);
  if (isTerminalRun(s.state)) endedListed.set(runId, { state: s.state, endedAt: s.endedAt, error: s.error });
  return s;
}

/** What a waiter compares: run state, step states, pending appends. */
function fingerprint(ctx: ManagerContext, runId: string): string {
  try {
    const s = peekStatus(ctx, runId).status;
    const r = peekRecord(ctx, runId);
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

/** Why a waiter checks: its first look, a file event, or the 1 s poll (the only one that reconciles). */
type CheckCause = 'first' | 'event' | 'poll';

/**
 * Blocks until `check()` holds, time is up or the client cancels. Event-driven: a watch on each directory that
 * matters (set up before the first check, so a change between the check and the watch is not left to the poll),
 * with a 1 s poll behind it that also reconciles (a dead runner writes nothing).
 */
async function waitUntil(dirs: string[], waitMs: number, signal: AbortSignal, check: (cause: CheckCause) => Promise<boolean>, onTick?: (elapsedMs: number) => void): Promise<WaitInfo> {
  const start = performance.now();
  return new Promise<WaitInfo>((resolve) => {
    let done = false;
    let watch: DirWatch | null = null;
    let checking = false;
    let again: CheckCause | null = null;
    const finish = (changed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      clearInterval(poll);
      clearInterval(progress);
      watch?.close();
      signal.removeEventListener('abort', onAbort);
      resolve({ waitedMs: Math.round(performance.now() - start), changed });
    };
    const run = async (cause: CheckCause) => {
      if (done) return;
      // One check at a time; what arrives meanwhile is one more check after it (a poll's reconciliation wins).
      if (checking) { if (again !== 'poll') again = cause; return; }
      checking = true;
      try {
        if (await check(cause)) finish(true);
      } catch {
        // The caller's own read after the wait reports what is wrong (e.g. a damaged status) as its answer.
        finish(true);
      } finally {
        checking = false;
        if (again && !done) { const next = again; again = null; void run(next); }
      }
    };
    const onAbort = () => finish(false);
    const timer = setTimeout(() => finish(false), waitMs);
    const poll = setInterval(() => void run('poll'), 1000);
    const progress = setInterval(() => onTick?.(performance.now() - start), 5000);
    signal.addEventListener('abort', onAbort, { once: true });
    watch = watchRunDirs(dirs, () => void run('event'));
    void run('first');
  });
}

export async function getStatus(ctx: ManagerContext, q: StatusQuery, o: { signal: AbortSignal; onProgress?: (elapsedMs: number, message: string) => void }): Promise<StatusAnswer> {
  if (ctx.distributed) return ctx.distributed.status(ctx, q, o);
  const waitMs = Math.min(q.waitMs ?? 0, ctx.settings.maxWaitMs);
  // Every listing repairs the queue (a slot freed by a process that died before handing it over, a run past its
  // queue timeout): docs/limits.md, "The queue".
  await serveQueueQuickly(ctx);
  if (q.runId !== undefined) {
    const runId = q.runId;
    requireVisible(ctx, runId);
    let info: WaitInfo | undefined;
    let status = await freshStatus(ctx, runId, { peek: true });
    if (waitMs > 0) {
      const before = q.until === 'terminal' ? '' : fingerprint(ctx, runId);
      info = isTerminalRun(status.state)
        ? { waitedMs: 0, changed: false }
        : await waitUntil([ctx.store.paths(runId).dir], waitMs, o.signal, async (cause) => {
          // A file event means a live writer: reconciling (a /proc look at the runner) is the poll's job. An event's
          // look reads the file only if it changed (`peekStatus`): the run watcher's look at the same version, or the
          // first look right after the read above, finds it read.
          if (cause === 'poll' && (status.state === 'queued' || status.attempt !== undefined)) await serveQueueQuickly(ctx);
          const s = cause === 'poll' ? await freshStatus(ctx, runId) : peekStatus(ctx, runId).status;
          if (!s) return true; // gone: the read below says so
          // A terminal status is final (the first terminal state wins), so the answer renders the one seen here.
          if (isTerminalRun(s.state)) { status = s; return true; }
          return q.until !== 'terminal' && fingerprint(ctx, runId) !== before;
        }, (ms) => o.onProgress?.(ms, `waiting on ${runId}`));
      if (!isTerminalRun(status.state)) status = await freshStatus(ctx, runId, { peek: true });
    }
    if (isTerminalRun(status.state)) await reconcileSettled(runId);
    const record = peekRecord(ctx, runId) ?? missingRecord(runId);
    return { kind: 'run', ...renderRun(ctx, record, status, q.outputBytes), ...(info ?? {}) };
  }
  const dismissed = new Set<string>();
  const list = async (): Promise<RunMeta[]> => {
    const runs = listVisibleRuns(ctx).filter((r) => ctx.visibleSessions().has(r.meta.sessionId) && (q.all || !r.dismissed));
    dismissed.clear();
    for (const r of runs) if (r.dismissed) dismissed.add(r.meta.runId);
    return runs.map((r) => r.meta);
  };
  let metas = await list();
  let info: WaitInfo | undefined;
  if (waitMs > 0) {
    const anyActive = async () => {
      for (const m of metas) {
        const s = await listedStatus(ctx, m.runId).catch(() => null);
        if (s && !isTerminalRun(s.state)) return true;
      }
      return false;
    };
    if (!(await anyActive())) {
      info = { waitedMs: 0, changed: false };
    } else {
      const before = listFingerprint(ctx, metas);
      const dirs = [ctx.layout.runsDir, ...metas.map((m) => ctx.store.paths(m.runId).dir)];
      info = await waitUntil(dirs, waitMs, o.signal, async (cause) => {
        const now = await list();
        if (cause === 'poll') for (const m of now) await freshStatus(ctx, m.runId).catch(() => null);
        return listFingerprint(ctx, now) !== before;
      }, (ms) => o.onProgress?.(ms, 'waiting on the session\'s runs'));
      metas = await list();
    }
  }
  const runs: RunSummary[] = [];
  const ledger = ctx.ledger.read();
  // The newest runs inline, the rest counted: a session with thousands of runs must not answer with megabytes
  // (resources/list pages through all of them).
  const omitted = Math.max(0, metas.length - LIST_MAX_RUNS);
  for (const m of metas.slice(0, LIST_MAX_RUNS)) {
    let s: ListedStatus | null = null;
    try { s = await listedStatus(ctx, m.runId); } catch { s = null; }
    const summary = summarize(ctx, m.runId, s, dismissed.has(m.runId));
    if (summary.state === 'queued') {
      const pos = queuePosition(ledger, m.runId);
      if (pos) summary.queue = pos;
    }
    runs.push(summary);
  }
  await releaseStaleRoots(ctx); // the capacity shown agrees with the runs listed: a proven-ended root holds no slot
  return { kind: 'list', sessionId: ctx.sessionId, runs, ...(omitted ? { omitted } : {}), capacity: capacitySnapshot(ctx), ...(info ?? {}) };
}
