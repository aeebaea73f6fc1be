/**
 * A distributed run as `status` shows it: the same shape as a local run's (src/manager/status-view.ts), built from
 * Redis — the mirrored status, and each step's output kept there up to SUBAGENTS_MAX_OUTPUT_BYTES.
 */
import type { RedisRuns, StoredRun } from '../../store/redis/run-store.js';
import { isTerminalRun, isTerminalStep, type RunStatus, type StepError, type StepStatus } from '../../store/run-types.js';
import type { ManagerContext } from '../context.js';
import { changesView, DEFAULT_OUTPUT_BYTES, headAndTail, type RunView, type StepView, type TextView } from '../status-view.js';

/** A status ended from outside its worker: steps that were running fail, steps never started are skipped. */
export function endedStatus(s: RunStatus, state: 'failed' | 'cancelled', error: StepError): RunStatus {
  const now = new Date().toISOString();
  const close = (st: StepStatus): StepStatus => ({
    ...st,
    ...(isTerminalStep(st.state) ? {} : { state: st.state === 'running' ? (state === 'cancelled' ? 'cancelled' : 'failed') : 'skipped', endedAt: st.state === 'running' ? now : st.endedAt }),
    ...(st.members ? { members: st.members.map(close) } : {}),
  });
  return { ...s, state, error, endedAt: now, updatedAt: now, steps: s.steps.map(close) };
}

/** Agents started by a run and every run under it (a terminal run's fan-out: what its tree actually used). */
export async function startedInTree(runs: RedisRuns, runId: string, ownStarted: number): Promise<number> {
  let total = ownStarted;
  const frontier = (await runs.children(runId)).map((c) => c.runId);
  for (let seen = 0; frontier.length > 0 && seen < 1000; seen++) {
    const id = frontier.shift()!;
    const run = await runs.read(id);
    if (!run) continue;
    total += run.status.steps.flatMap((s) => (s.members ? s.members : [s])).filter((s) => s.startedAt !== null).length;
    frontier.push(...(await runs.children(id)).map((c) => c.runId));
  }
  return total;
}

/** Head and tail of a stored output around an omission marker, as local files are shown. */
async function boundedStored(runs: RedisRuns, runId: string, key: string, budget: number): Promise<TextView> {
  const size = await runs.outputLength(runId, key);
  if (size === 0) return { text: '', bytes: 0, truncated: false };
  if (size <= budget) return { text: (await runs.outputRange(runId, key, 0, size - 1)).toString('utf8'), bytes: size, truncated: false };
  const half = Math.max(0, Math.floor(budget / 2));
  const head = await runs.outputRange(runId, key, 0, half - 1);
  const tail = await runs.outputRange(runId, key, size - half, size - 1);
  return headAndTail(head, tail, size);
}

export async function renderDistributedRun(runs: RedisRuns, ctx: ManagerContext, run: StoredRun, outputBytes = DEFAULT_OUTPUT_BYTES): Promise<RunView> {
  const { record, status } = run;
  const runId = record.runId;
  let steps = status.steps;
  const flat = steps.flatMap((s) => (s.members ? [s, ...s.members] : [s]));
  const textCount = flat.filter((s) => !s.members).length + 1;
  const runBudget = Math.floor(outputBytes / 2);
  const stepBudget = Math.max(64, Math.floor((outputBytes - runBudget) / Math.max(1, textCount)));
  const children = await runs.children(runId);
  const view = async (s: StepStatus): Promise<StepView> => {
    let output: TextView = { text: '', bytes: s.outputBytes, truncated: false };
    if (!s.members) {
      const t = await boundedStored(runs, runId, s.key, stepBudget);
      const bytes = Math.max(t.bytes, s.outputBytes);
      output = { ...t, bytes, truncated: t.truncated || s.outputTruncated || bytes > t.bytes };
    }
    const v: StepView = {
      index: s.index, agent: s.agent, state: s.state, exitCode: s.exitCode, signal: s.signal, startedAt: s.startedAt,
      endedAt: s.endedAt, pid: s.process?.pid ?? null, output, usage: s.usage, costUsd: s.costUsd, error: s.error,
      children: children.filter((c) => c.stepKey === s.key).map((c) => c.runId),
    };
    if (s.changes) v.changes = changesView(s.changes);
    if (s.state === 'failed' && !s.members) {
      const err = await boundedStored(runs, runId, `${s.key}.err`, 512);
      v.stderrTail = err.text;
    }
    if (s.members) v.members = await Promise.all(s.members.map(view));
    return v;
  };
  if (record.mode === 'parallel' && steps[0]?.members) steps = steps[0].members;
  const stepViews = await Promise.all(steps.map(view));
  const runOut = isTerminalRun(status.state) ? await boundedStored(runs, runId, 'run', runBudget) : { text: '', bytes: 0, truncated: false };
  const created = Date.parse(record.createdAt);
  const startedMs = status.startedAt ? Date.parse(status.startedAt) : null;
  const endMs = status.endedAt ? Date.parse(status.endedAt) : null;
  // An ended run shows what its tree started (a tree's claims of steps never started are not counted); an active one
  // what its tree has claimed, the root's budget being shared by every run under it (docs/scale-out.md).
  const used = isTerminalRun(status.state)
    ? await startedInTree(runs, runId, flat.filter((s) => !s.members && s.startedAt !== null).length)
    : await runs.fanoutUsed(record.rootRunId ?? record.runId);
  const v: RunView = {
    runId, sessionId: record.sessionId, state: status.state, mode: record.mode, label: record.label, cwd: record.cwd,
    createdAt: record.createdAt, startedAt: status.startedAt, endedAt: status.endedAt,
    durationMs: endMs !== null ? endMs - (startedMs ?? created) : startedMs !== null ? Date.now() - startedMs : null,
    lastActivityAt: status.updatedAt, error: status.error, steps: stepViews,
    output: { ...runOut, uri: `subagents://runs/${runId}/output` },
    fanout: { used, limit: record.limits.maxSpawns, remaining: Math.max(0, record.limits.maxSpawns - used) },
    pendingAppends: pendingAppends(run), adopted: record.sessionId !== ctx.sessionId && (record.depth ?? 0) === 0, dismissed: run.dismissed, runnerPid: status.runner?.pid ?? null,
  };
  if (status.runnerLogTail) v.runnerLogTail = status.runnerLogTail;
  if (status.state === 'queued') {
    const place = await runs.queuePlace(runId);
    if (place) v.queue = place;
  }
  return v;
}

/**
 * Accepted appends not yet run, counted as local mode counts them (src/manager/status-view.ts, countPendingAppends):
 * those the runner has not taken into its steps yet, and taken ones that have not started.
 */
function pendingAppends(run: StoredRun): number {
  const { status } = run;
  if (isTerminalRun(status.state)) return 0;
  const untaken = Math.max(0, run.appendsAccepted - status.appendsTaken);
  return untaken + status.steps.filter((s) => s.appendSeq != null && s.state === 'pending').length;
}
