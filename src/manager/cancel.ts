import { isAlive, servesRun } from '../process/identity.js';
import { findRunProcesses, runnerGroups, terminateProcesses } from '../process/terminate.js';
import { requestCancel, requestTreeCancel, type CancelReason } from '../lifecycle/cancel-request.js';
import { endRun } from '../lifecycle/run-lifecycle.js';
import { isTerminalRun } from '../store/run-types.js';
import { DirWatch } from '../wait.js';
import type { ManagerContext } from './context.js';
import { requireRecord, requireVisible } from './listing.js';
import { reconcileRun } from './reconcile.js';
import { removeStaleWorktrees } from './isolation.js';
import { freshStatus } from './run-status.js';
import { endQueued } from '../lifecycle/queue.js';
import { serveQueue } from './queue.js';

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
export async function cancelRun(ctx: ManagerContext, runId: string, onProgress?: (elapsedMs: number) => void, reason: CancelReason = 'CANCELLED'): Promise<CancelResult> {
  if (ctx.distributed) return ctx.distributed.cancel(ctx, runId);
  requireVisible(ctx, runId);
  let s = await freshStatus(ctx, runId);
  // A queued run ends at once, its claims returned (docs/limits.md, "The queue"); so does one whose hand-off died
  // before its runner started. One a live process is starting is cancelled like any run, through its runner.
  if (s.state === 'queued' || (s.state === 'starting' && s.attempt !== undefined && !isAlive(s.launcher))) {
    s = (await endQueued(ctx, runId, 'CANCELLED')) ?? s;
  }
  if (!isTerminalRun(s.state)) {
    const paths = ctx.store.paths(runId);
    // PARENT_ENDED: a worker stopping a nested run whose launching agent ended on another machine (docs/scale-out.md).
    requestCancel(ctx.store, runId, reason, ctx.sessionId);
    requestTreeCancel(ctx.store, runId, reason);
    const record = requireRecord(ctx, runId);
    const deadline = performance.now() + record.killGraceMs + 1500;
    const start = performance.now();
    let lastTick = start;
    const changes = new DirWatch([paths.dir]);
    try {
      while (performance.now() < deadline) {
        s = ctx.store.readStatus(runId) ?? s;
        if (isTerminalRun(s.state)) break;
        if (s.state === 'running' && !isAlive(s.runner)) { await reconcileRun(ctx, runId); continue; }
        if (s.state === 'starting' && !isAlive(record.server)) { await reconcileRun(ctx, runId); continue; }
        if (performance.now() - lastTick > 1000) { lastTick = performance.now(); onProgress?.(lastTick - start); }
        await changes.next(100);
      }
    } finally {
      changes.close();
    }
    s = ctx.store.readStatus(runId) ?? s;
    if (!isTerminalRun(s.state) && s.runner) {
      // The runner did not act within its grace: stop everything of the run from here.
      const runner = s.runner;
      const term = await terminateProcesses(() => findRunProcesses({ pgids: runnerGroups(runner), token: record.runToken, since: runner.startTime, exclude: [process.pid] }), 0, 500);
      const ended = await endRun(ctx, record, { state: 'cancelled', error: reason === 'PARENT_ENDED' ? { code: 'PARENT_ENDED', message: 'the agent that launched this run ended' } : { code: 'CANCELLED', message: 'the run was cancelled' }, survivors: term.survivors });
      s = ended.status;
      // The runner did not log its end: this does, so that followers of the event log (watch) see the run end.
      if (ended.ours) ctx.store.event(runId, { type: 'ended', state: 'cancelled', by: 'canceller' });
      // Not awaited: deleting a large worktree must not hold up the answer (gc sweeps what an exit cuts short).
      if (term.survivors.length === 0) void removeStaleWorktrees(ctx, runId);
    }
    // The runner exits right after recording the end (ledger release, last event), or goes back to the warm pool: wait
    // for that as well, within the same bound, so that an answer of "cancelled" means no process of the run is left.
    const runner = s.runner;
    if (isTerminalRun(s.state) && runner) {
      const exitBy = Math.max(deadline, performance.now() + 1000);
      while (servesRun(runner, paths.dir) && performance.now() < exitBy) await sleep(20);
    }
  }
  void serveQueue(ctx); // a slot this cancel freed (or that a lost runner held) goes to the queue's head
  return { runId, state: s.state, error: s.error, survivors: s.survivors.map((p) => p.pid) };
}
