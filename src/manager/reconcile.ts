import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { findRunProcesses, runnerGroups, terminateProcesses } from '../process/terminate.js';
import { readTail } from '../runner/agent-process.js';
import { removeStaleTemps, writeFileAtomic } from '../store/atomic-write.js';
import { readJsonFile } from '../store/json-file.js';
import { withLedger } from '../store/ledger.js';
import { treeIsLive } from '../store/run-tree.js';
import { isTerminalRun, isTerminalStep, type RunStatus, type StepError, type StepStatus } from '../store/run-types.js';
import type { ManagerContext } from './context.js';
import { removeStaleWorktrees } from './isolation.js';

const inflight = new Map<string, Promise<void>>();

/**
 * SPEC §6 reconciliation of one run: a non-terminal run whose runner is gone (dead, zombie, or its pid now another
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
 * waits for it, so that "failed/RUNNER_LOST" also means its slot is back (the status is written before the ledger).
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
  const record = ctx.store.readRecord(runId);
  if (!record) return;
  const paths = ctx.store.paths(runId);
  if (status.state === 'starting') {
    if (isAlive(record.server)) return; // its launcher is still handshaking (and will record any failure itself)
    const ready = readJsonFile<ProcessIdentity>(paths.ready);
    if (ready && isAlive(ready)) {
      // It may be just claiming the start; if it wins the lock, the run is live and the CAS below does nothing.
      await new Promise((r) => setTimeout(r, 50));
    }
    // Only the process that records the end returns the ledger (two servers reconciling at once must not refund a
    // tree's unstarted claims twice); a release lost to a crash is reclaimed by capacity pruning.
    let ours = false;
    const after = await ctx.store.update(runId, (cur) => {
      if (cur.state !== 'starting') return null;
      ours = true;
      return ended(cur, 'failed', { code: 'HANDSHAKE_FAILED', message: 'the launching server ended before the run started; no agent was started' });
    }, { durable: true });
    // Re-read: a runner that reported ready after our first look checks status only after writing ready.json, so
    // either it sees the run ended and exits, or we see its report here and stop it.
    const readyNow = ready ?? readJsonFile<ProcessIdentity>(paths.ready);
    if (after.state === 'failed' && readyNow && isAlive(readyNow)) {
      await terminateProcesses(() => findRunProcesses({ pgids: runnerGroups(readyNow) }), 0);
    }
    if (after.state === 'failed' && ours) await releaseLedger(ctx, runId, record.depth === 0, record.rootRunId, status);
    // Its launching server is dead: temps it left mid-write (e.g. the catalog snapshot) go too, and any other dead
    // writer's (a server killed while writing a cancel request).
    if (after.state === 'failed') removeStaleTemps(paths.dir, null);
    return;
  }
  if (isAlive(status.runner)) return;
  const runner = status.runner!;
  const find = () => findRunProcesses({ pgids: runnerGroups(runner), token: record.runToken, since: runner.startTime, exclude: [process.pid] });
  const term = await terminateProcesses(find, record.killGraceMs);
  // The runner's last words; a runner killed outright (SIGKILL, the OOM killer) leaves none, which is worth saying.
  const tail = readTail(paths.runnerLog, 2048) || '(runner.log is empty: the runner was killed without a word, e.g. by SIGKILL or the OOM killer)';
  // A run someone asked to stop, whose runner is gone (it may have been stopped by the canceller itself, racing with
  // us from another server), ends the way it was asked to: cancelled, not lost.
  const asked = (() => { try { return readJsonFile<{ reason?: string }>(paths.cancelRequest); } catch { return { reason: 'CANCELLED' }; } })();
  let ours = false;
  const after = await ctx.store.update(runId, (cur) => {
    ours = true;
    const next = asked
      ? ended(cur, 'cancelled', asked.reason === 'PARENT_ENDED'
        ? { code: 'PARENT_ENDED', message: 'the agent that launched this run ended; its runner was gone, so its processes were stopped by reconciliation' }
        : { code: 'CANCELLED', message: 'the run was cancelled; its runner was gone, so its processes were stopped by reconciliation' })
      : ended(cur, 'failed', { code: 'RUNNER_LOST', message: `the runner (pid ${runner.pid}) ended without finishing the run${lastWords(tail)}; its agents were stopped` });
    next.runnerLogTail = tail;
    next.survivors = term.survivors.map((p) => ({ pid: p.pid, startTime: p.startTime }));
    return next;
  }, { durable: true });
  ctx.store.event(runId, { type: 'reconciled', state: after.state, error: after.error?.code ?? null });
  // A runner killed mid-write leaves its temp files behind (the rename never came); it is proven gone now. So does a
  // server killed while writing a cancel request or an append: every writer that is gone.
  removeStaleTemps(paths.dir, null);
  // Nested runs of a lost run end too.
  for (const c of ctx.store.children(runId)) {
    try { writeFileAtomic(ctx.store.paths(c.runId).cancelRequest, JSON.stringify({ at: new Date().toISOString(), reason: 'PARENT_ENDED' })); } catch { /* gone */ }
  }
  if (term.survivors.length === 0 && ours) await releaseLedger(ctx, runId, record.depth === 0, record.rootRunId, after);
  // Its worktrees go now that nothing of the run runs (what their steps committed stays on the branches). Not
  // awaited: deleting thousands of files must not hold up the status answer that waits for this reconciliation;
  // gc sweeps what an exiting process cuts short.
  if (term.survivors.length === 0 && ours) void removeStaleWorktrees(ctx, runId);
}

/**
 * The runner's own last line (`runner: could not write status.json (ENOSPC) …`), quoted in RUNNER_LOST so the cause
 * is in the error itself. Only lines the runner wrote with its prefix: runner.log never holds agent output.
 */
function lastWords(tail: string): string {
  const line = tail.split('\n').reverse().find((l) => l.startsWith('runner: '));
  return line ? ` (it said: "${line.slice('runner: '.length, 300).replace(/[^\x20-\x7e]/g, '?')}")` : '';
}

function ended(cur: RunStatus, state: 'failed' | 'cancelled', error: StepError): RunStatus {
  const close = (s: StepStatus): StepStatus => ({
    ...s,
    state: isTerminalStep(s.state) ? s.state : s.state === 'running' ? (state === 'cancelled' ? 'cancelled' : 'failed') : 'skipped',
    endedAt: isTerminalStep(s.state) ? s.endedAt : s.state === 'running' ? new Date().toISOString() : null,
    members: s.members?.map(close),
  });
  return { ...cur, state, error, endedAt: new Date().toISOString(), steps: cur.steps.map(close) };
}

/** Returns the slot, this run's agent slots and (when nothing started) its claims. */
async function releaseLedger(ctx: ManagerContext, runId: string, topLevel: boolean, rootRunId: string, status: RunStatus): Promise<void> {
  let unstarted = 0;
  for (const st of status.steps) {
    if (st.members) unstarted += st.members.filter((m) => m.startedAt === null).length;
    else if (st.startedAt === null) unstarted++;
  }
  await withLedger(ctx.layout, (l) => {
    for (const key of Object.keys(l.agents)) if (key.startsWith(`${runId}:`)) delete l.agents[key];
    const tree = l.trees[rootRunId];
    if (tree) tree.used = Math.max(0, tree.used - unstarted);
    // A lost root whose nested runs still go (they were just asked to end) keeps its slot until they have ended:
    // capacity pruning returns it then.
    if (topLevel && !treeIsLive(l, ctx.store, runId)) {
      delete l.roots[runId];
      delete l.trees[runId];
    }
  }).catch(() => {});
}
