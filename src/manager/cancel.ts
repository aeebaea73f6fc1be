import fs from 'node:fs';
import { isAlive } from '../process/identity.js';
import { findRunProcesses, runnerGroups, terminateProcesses } from '../process/terminate.js';
import { writeFileAtomic } from '../store/atomic-write.js';
import { isTerminalRun, isTerminalStep, type RunStatus, type StepStatus } from '../store/run-types.js';
import type { ManagerContext } from './context.js';
import { requireVisible } from './listing.js';
import { requestTreeCancel } from './nesting.js';
import { reconcileRun } from './reconcile.js';
import { removeStaleWorktrees } from './isolation.js';
import { freshStatus } from './run-status.js';
import { withLedger } from '../store/ledger.js';
import { treeIsLive } from '../store/run-tree.js';

export interface CancelResult {
  runId: string;
  state: string;
  error: { code: string; message: string } | null;
  /** Processes that could not be killed; their slots stay held until they are gone. */
  survivors: number[];
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Asks the runner to stop the run and its tree (a request file: the runner is the single writer of status), and
 * waits for the terminal state within grace + 2 s. A runner that is gone is reconciled; one that does not answer
 * (stopped, wedged) is stopped from here, identity-checked, and the run recorded cancelled.
 */
export async function cancelRun(ctx: ManagerContext, runId: string, onProgress?: (elapsedMs: number) => void): Promise<CancelResult> {
  requireVisible(ctx, runId);
  let s = await freshStatus(ctx, runId);
  if (!isTerminalRun(s.state)) {
    const paths = ctx.store.paths(runId);
    writeFileAtomic(paths.cancelRequest, JSON.stringify({ at: new Date().toISOString(), reason: 'CANCELLED', by: ctx.sessionId }));
    requestTreeCancel(ctx.store, runId, 'CANCELLED');
    const record = ctx.store.readRecord(runId)!;
    const deadline = performance.now() + record.killGraceMs + 1500;
    const start = performance.now();
    let lastTick = start;
    while (performance.now() < deadline) {
      s = ctx.store.readStatus(runId) ?? s;
      if (isTerminalRun(s.state)) break;
      if (s.state === 'running' && !isAlive(s.runner)) { await reconcileRun(ctx, runId); continue; }
      if (s.state === 'starting' && !isAlive(record.server)) { await reconcileRun(ctx, runId); continue; }
      if (performance.now() - lastTick > 1000) { lastTick = performance.now(); onProgress?.(lastTick - start); }
      await waitForChange(paths.dir, 100);
    }
    s = ctx.store.readStatus(runId) ?? s;
    if (!isTerminalRun(s.state) && s.runner) {
      // The runner did not act within its grace: stop everything of the run from here.
      const runner = s.runner;
      const term = await terminateProcesses(() => findRunProcesses({ pgids: runnerGroups(runner), token: record.runToken, since: runner.startTime, exclude: [process.pid] }), 0, 500);
      let wrote = false;
      s = await ctx.store.update(runId, (cur) => { wrote = true; return cancelled(cur, term.survivors.map((p) => ({ pid: p.pid, startTime: p.startTime }))); }, { durable: true });
      // The runner did not log its end: this does, so that followers of the event log (watch) see the run end.
      if (wrote) ctx.store.event(runId, { type: 'ended', state: 'cancelled', by: 'canceller' });
      if (term.survivors.length === 0) {
        await withLedger(ctx.layout, (l) => {
          for (const k of Object.keys(l.agents)) if (k.startsWith(`${runId}:`)) delete l.agents[k];
          // A root whose tree still lives keeps its slot; capacity pruning returns it once the tree has ended.
          if (record.depth === 0 && !treeIsLive(l, ctx.store, runId)) { delete l.roots[runId]; delete l.trees[runId]; }
        }).catch(() => {});
        // Not awaited: deleting a large worktree must not hold up the answer (gc sweeps what an exit cuts short).
        void removeStaleWorktrees(ctx, runId);
      }
    }
    // The runner exits right after recording the end (ledger release, last event): wait for that as well, within the
    // same bound, so that an answer of "cancelled" means no process of the run is left.
    const runner = s.runner;
    if (isTerminalRun(s.state) && runner) {
      const exitBy = Math.max(deadline, performance.now() + 1000);
      while (isAlive(runner) && performance.now() < exitBy) await sleep(20);
    }
  }
  return { runId, state: s.state, error: s.error, survivors: s.survivors.map((p) => p.pid) };
}

function cancelled(cur: RunStatus, survivors: RunStatus['survivors']): RunStatus {
  const close = (st: StepStatus): StepStatus => ({
    ...st,
    state: isTerminalStep(st.state) ? st.state : st.state === 'running' ? 'cancelled' : 'skipped',
    members: st.members?.map(close),
  });
  return { ...cur, state: 'cancelled', error: { code: 'CANCELLED', message: 'the run was cancelled' }, endedAt: new Date().toISOString(), steps: cur.steps.map(close), survivors };
}

function waitForChange(dir: string, maxMs: number): Promise<void> {
  return new Promise((resolve) => {
    let w: fs.FSWatcher | undefined;
    const done = () => { clearTimeout(t); w?.close(); resolve(); };
    const t = setTimeout(done, maxMs);
    try { w = fs.watch(dir, done); w.on('error', () => {}); } catch { /* timer only */ }
  });
}
