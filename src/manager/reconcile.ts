import fs from 'node:fs';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { findRunProcesses, runnerGroups, terminateProcesses } from '../process/terminate.js';
import { readEvents } from '../store/event-log.js';
import { readTail } from '../store/text-tail.js';
import { requestCancel, readCancelRequest } from '../lifecycle/cancel-request.js';
import { endRun } from '../lifecycle/run-lifecycle.js';
import { removeStaleTemps } from '../store/atomic-write.js';
import { ReadyFile, readStateFile } from '../store/state-files.js';
import type { Ledger } from '../store/ledger.js';
import { isTerminalRun } from '../store/run-types.js';
import type { ManagerContext } from './context.js';
import { serveQueue } from './queue.js';
import { removeStaleWorktrees } from './isolation.js';

const inflight = new Map<string, Promise<void>>();

/**
 * Reconciliation of one run (docs/contract.md, "Run states"): a non-terminal run whose runner is gone (dead, zombie, or its pid now another
 * process) becomes failed/RUNNER_LOST after its leftovers (found by group and run token, identity-checked) are
 * stopped; a launch whose server died before the start becomes failed/HANDSHAKE_FAILED. Concurrent callers share one pass.
 */
export function reconcileRun(ctx: ManagerContext, runId: string): Promise<void> {
  const running = inflight.get(runId);
  if (running) return running;
  const p = reconcileOnce(ctx, runId).catch(() => {}).finally(() => inflight.delete(runId));
  inflight.set(runId, p);
  return p;
}

/**
 * This process's reconciliation of the run, if one is under way. A status answer that reports the end it recorded
 * waits for it, so that "failed/RUNNER_LOST" also means what follows the end (stopping leftovers, asking nested runs
 * to end) is done.
 */
export function reconcileSettled(runId: string): Promise<void> {
  return inflight.get(runId) ?? Promise.resolve();
}

async function reconcileOnce(ctx: ManagerContext, runId: string): Promise<void> {
  const status = ctx.store.readStatus(runId);
  if (!status || isTerminalRun(status.state)) return;
  // The common case, first and cheapest (a /proc read): a running run whose runner lives needs nothing, not even its
  // record read (every status call and every watcher scan of an active run comes here).
  if (status.state !== 'starting' && isAlive(status.runner)) return;
  // A queued run has no runner to lose; one being handed a slot is the queue's to repair (docs/limits.md, "The queue"):
  // a dead hand-off leaves its entry for the next server's launch, listing or sweep, which starts it again.
  if (status.state === 'queued') { await endUnacknowledged(ctx, runId); return; }
  if (status.state === 'starting' && status.attempt !== undefined) return;
  const record = ctx.store.readRecord(runId);
  if (!record) return;
  const paths = ctx.store.paths(runId);
  if (status.state === 'starting') {
    if (isAlive(record.server)) return; // its launcher is still handshaking (and will record any failure itself)
    const ready = readStateFile<ProcessIdentity>(paths.ready, ReadyFile);
    if (ready && isAlive(ready)) {
      // It may be just claiming the start; if it wins the lock, the run is live and the CAS below does nothing.
      await new Promise((r) => setTimeout(r, 50));
    }
    // Only the process that records the end returns the ledger (two servers reconciling at once must not refund a
    // tree's unstarted claims twice); a release lost to a crash is reclaimed by capacity pruning.
    const { status: after } = await endRun(ctx, record, {
      state: 'failed',
      error: { code: 'HANDSHAKE_FAILED', message: 'the launching server ended before the run started; no agent was started' },
      from: ['starting'],
    });
    // Re-read: a runner that reported ready after our first look checks status only after writing ready.json, so
    // either it sees the run ended and exits, or we see its report here and stop it.
    const readyNow = ready ?? readStateFile<ProcessIdentity>(paths.ready, ReadyFile);
    if (after.state === 'failed' && readyNow && isAlive(readyNow)) {
      await terminateProcesses(() => findRunProcesses({ pgids: runnerGroups(readyNow) }), 0);
    }
    // Its launching server is dead: temps it left mid-write (e.g. the catalog snapshot) go too, and any other dead
    // writer's (a server killed while writing a cancel request).
    if (after.state === 'failed') removeStaleTemps(paths.dir, null);
    return;
  }
  if (isAlive(status.runner)) return;
  const runner = status.runner!;
  const find = () => findRunProcesses({ pgids: runnerGroups(runner), token: record.runToken, since: runner.startTime, exclude: [process.pid] });
  const term = await terminateProcesses(find, record.killGraceMs);
  // A runner killed mid-write leaves its temp files behind (the rename never came). It is proven gone now, by its
  // identity, so its temps go by its pid, even while that pid is a zombie not yet reaped (signal 0 still finds one),
  // and before the end is written: a refused end write (a full disk) must not leave them for the next pass.
  // (Killed inside a ledger section, it also left its temp of ledger.json in the home: that goes with its lock, cleared
  // by whoever takes the ledger next, this pass's end included; store/lock.ts.)
  removeStaleTemps(paths.dir, runner.pid);
  // The runner's last words; a runner killed outright (SIGKILL, the OOM killer) leaves none, which is worth saying.
  const tail = readTail(paths.runnerLog, 2048) || '(runner.log is empty: the runner was killed without a word, e.g. by SIGKILL or the OOM killer)';
  // A run someone asked to stop, whose runner is gone (it may have been stopped by the canceller itself, racing with
  // us from another server), ends the way it was asked to: cancelled, not lost. Its slots stay held while a process
  // of it survived SIGKILL (capacity pruning returns them once it is gone).
  const asked = readCancelRequest(ctx.store, runId);
  const { status: after, ours } = await endRun(ctx, record, {
    ...(asked
      ? { state: 'cancelled', error: asked === 'PARENT_ENDED'
        ? { code: 'PARENT_ENDED', message: 'the agent that launched this run ended; its runner was gone, so its processes were stopped by reconciliation' }
        : { code: 'CANCELLED', message: 'the run was cancelled; its runner was gone, so its processes were stopped by reconciliation' } }
      : { state: 'failed', error: { code: 'RUNNER_LOST', message: `the runner (pid ${runner.pid}) ended without finishing the run${lastWords(tail)}; its agents were stopped` } }),
    runnerLogTail: tail,
    survivors: term.survivors,
    storedOutput: (key) => { try { return fs.lstatSync(paths.output(key)).size; } catch { return 0; } },
  });
  ctx.store.event(runId, { type: 'reconciled', state: after.state, error: after.error?.code ?? null });
  void serveQueue(ctx); // the slot the lost runner held goes to the queue's head
  // So do those of a server killed while writing a cancel request or an append: every writer that is gone.
  removeStaleTemps(paths.dir, null);
  // Nested runs of a lost run end too.
  for (const c of ctx.store.children(runId)) {
    try { requestCancel(ctx.store, c.runId, 'PARENT_ENDED'); } catch { /* gone */ }
  }
  // Its worktrees go now that nothing of the run runs (what their steps committed stays on the branches). Not
  // awaited: deleting thousands of files must not hold up the status answer that waits for this reconciliation;
  // gc sweeps what an exiting process cuts short.
  if (term.survivors.length === 0 && ours) void removeStaleWorktrees(ctx, runId);
}

/**
 * A queued run whose launching server died after writing its directory and before adding it to the ledger's queue
 * (the acknowledgement): no queue entry will ever start it or time it out, and its launch was never answered. It ends
 * failed/HANDSHAKE_FAILED; its tree claimed nothing yet (the claim is made with the queue entry). Not ours:
 * - a run whose server lives (still being queued);
 * - a run in the queue, or in a slot being handed to it (the queue's);
 * - a run whose log says it was queued (acknowledged: a timeout or a cancel is ending it, or its ledger was lost).
 * The last check is made under the run's lock, which `endQueued` holds from taking the entry out to the end.
 */
async function endUnacknowledged(ctx: ManagerContext, runId: string): Promise<void> {
  const record = ctx.store.readRecord(runId);
  if (!record || isAlive(record.server)) return;
  const holds = (l: Ledger): boolean => Boolean(l.queue?.[runId] || l.roots[runId]);
  if (holds(ctx.ledger.read())) return;
  const paths = ctx.store.paths(runId);
  if (readEvents(paths.events).events.some((e) => e.type === 'queued')) return;
  await ctx.store.withRunLock(runId, async () => {
    if (await ctx.ledger.change((l) => holds(l), { durable: false })) return;
    await endRun(ctx, record, {
      state: 'failed',
      error: { code: 'HANDSHAKE_FAILED', message: 'the launching server ended before the run was queued; its launch was never acknowledged and nothing ran' },
      from: ['queued'],
    }, { locked: true });
  });
  removeStaleTemps(paths.dir, null);
}

/**
 * The runner's own last line (`runner: could not write status.json (ENOSPC) …`), quoted in RUNNER_LOST so the cause
 * is in the error itself. Only lines the runner wrote with its prefix: runner.log never holds agent output.
 */
function lastWords(tail: string): string {
  const line = tail.split('\n').reverse().find((l) => l.startsWith('runner: '));
  return line ? ` (it said: "${line.slice('runner: '.length, 300).replace(/[^\x20-\x7e]/g, '?')}")` : '';
}
