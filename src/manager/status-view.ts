import fs from 'node:fs';
import { redactSecrets } from '../agents/adapters/shared.js';
import { readTail } from '../store/text-tail.js';
import { incompleteTail, strayHead } from '../utf8-cut.js';
import type { RunPaths } from '../store/layout.js';
import { openStateFile } from '../store/state-file.js';
import { isTerminalRun, type AppendRecord, type RunRecord, type RunStatus, type StepSpec, type StepStatus } from '../store/run-types.js';
import { newStepStatus } from '../store/step-status.js';
import { fanoutSnapshot, queueSnapshot } from './capacity.js';
import { descendants } from '../lifecycle/run-tree.js';
import type { ManagerContext } from './context.js';
import { isVisible, readMeta } from './listing.js';

export const DEFAULT_OUTPUT_BYTES = 8 * 1024;
export const MAX_OUTPUT_BYTES = 64 * 1024;
const STDERR_TAIL_BYTES = 512;

export interface TextView { text: string; bytes: number; truncated: boolean }

export interface StepView {
  index: number;
  agent: string;
  state: string;
  exitCode: number | null;
  signal: string | null;
  startedAt: string | null;
  endedAt: string | null;
  pid: number | null;
  output: TextView;
  stderrTail?: string;
  usage: Record<string, number> | null;
  costUsd: number | null;
  error: { code: string; message: string } | null;
  children: string[];
  /** Isolated steps: the branch and what changed (the patch: …/steps/{index}/patch). */
  changes?: { branch: string; commit: string; base: string; files: number; insertions: number; deletions: number };
  members?: StepView[];
}

export interface RunView {
  runId: string;
  sessionId: string;
  state: string;
  mode: string;
  label: string | null;
  cwd: string;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  durationMs: number | null;
  lastActivityAt: string;
  error: { code: string; message: string } | null;
  steps: StepView[];
  output: TextView & { uri: string };
  fanout: { used: number; limit: number; remaining: number };
  pendingAppends: number;
  adopted: boolean;
  dismissed: boolean;
  runnerPid: number | null;
  runnerLogTail?: string;
  survivors?: number[];
  /** While queued: the run's 1-based place in the queue and the queue's length. */
  queue?: { position: number; length: number };
  escaped?: Array<{ pid: number; command: string }>;
}

export interface RunSummary {
  runId: string;
  sessionId: string;
  state: string;
  mode: string;
  label: string | null;
  agents: string[];
  createdAt: string;
  endedAt: string | null;
  error: { code: string; message: string } | null;
  adopted: boolean;
  dismissed: boolean;
  queue?: { position: number; length: number };
}

/**
 * Reads `bytes` of a text file as head + tail around an omission marker, with the real size; the model sees a
 * bounded, delimited slice and the rest stays behind the output resource.
 */
export function boundedText(file: string, budget: number, printed = 0): TextView {
  // A FIFO, directory or link in the output's place reads as no output (never a blocked event loop).
  let opened: { fd: number; size: number } | null = null;
  try { opened = openStateFile(file, file); } catch { /* not a regular file */ }
  if (opened === null) return { text: '', bytes: 0, truncated: false };
  const { fd, size } = opened;
  const half = Math.max(0, Math.floor(budget / 2));
  try {
    if (size <= budget) {
      const all = Buffer.alloc(size);
      const n = fs.readSync(fd, all, 0, size, 0);
      return { text: all.subarray(0, n).toString('utf8'), bytes: size, truncated: false };
    }
    const head = Buffer.alloc(half);
    fs.readSync(fd, head, 0, half, 0);
    const tail = Buffer.alloc(half);
    fs.readSync(fd, tail, 0, half, size - half);
    return headAndTail(head, tail, size, printed);
  } finally {
    fs.closeSync(fd);
  }
}

/**
 * The view of a text too long to show whole: its head and tail (cut back to whole characters) around a marker that
 * counts the bytes left out. `printed`: what the agent wrote, when more than the `size` stored (the output cap).
 */
export function headAndTail(head: Buffer, tail: Buffer, size: number, printed = size): TextView {
  const h = head.subarray(0, head.length - incompleteTail(head));
  const t = tail.subarray(strayHead(tail));
  const omitted = size - h.length - t.length;
  const marker = printed > size
    ? `…[${omitted} of ${size} stored bytes omitted; the agent printed ${printed}, and past the output cap nothing was kept; read the output resource for the stored bytes]…`
    : `…[${omitted} of ${size} bytes omitted; read the output resource for all of it]…`;
  return { text: `${h.toString('utf8')}\n${marker}\n${t.toString('utf8')}`, bytes: Math.max(size, printed), truncated: true };
}

/** Appended steps the runner has not taken yet, shown as pending (or skipped once the run has ended). */
function untakenAppends(record: RunRecord, status: RunStatus, appends: AppendRecord[]): StepStatus[] {
  const base = record.steps.length + status.appendsTaken;
  return appends.filter((a) => a.seq > status.appendsTaken).map((a, i) => {
    const st = newStepStatus(base + i, a.step as StepSpec);
    st.appendSeq = a.seq;
    if (isTerminalRun(status.state)) {
      st.state = 'skipped';
      for (const m of st.members ?? []) m.state = 'skipped';
    }
    return st;
  });
}

export function countPendingAppends(record: RunRecord, status: RunStatus, appends: AppendRecord[]): number {
  const untaken = untakenAppends(record, status, appends).filter((s) => s.state === 'pending').length;
  return untaken + status.steps.filter((s) => s.appendSeq !== null && s.state === 'pending').length;
}

function lastActivity(paths: RunPaths, status: RunStatus): string {
  let t = Date.parse(status.updatedAt) || 0;
  for (const f of [paths.events, paths.outDir]) {
    try { t = Math.max(t, fs.statSync(f).mtimeMs); } catch { /* absent */ }
  }
  return new Date(t).toISOString();
}

/** The full status of one run (docs/contract.md, "Tools"), inline text bounded by `outputBytes` across the whole result. */
export function renderRun(ctx: ManagerContext, record: RunRecord, status: RunStatus, outputBytes = DEFAULT_OUTPUT_BYTES): RunView {
  const paths = ctx.store.paths(record.runId);
  const appends = record.mode === 'chain' ? ctx.store.readAppends(record.runId) : []; // only chains take appends
  let steps = [...status.steps, ...untakenAppends(record, status, appends)];
  const children = ctx.store.children(record.runId);
  const flat = (list: StepStatus[]): StepStatus[] => list.flatMap((s) => (s.members ? [s, ...s.members] : [s]));
  const textCount = flat(steps).filter((s) => !s.members).length + 1;
  // Half the budget for the run's own output, the rest shared by the steps.
  const runBudget = Math.floor(outputBytes / 2);
  const stepBudget = Math.max(64, Math.floor((outputBytes - runBudget) / Math.max(1, textCount)));
  const view = (s: StepStatus): StepView => {
    const v: StepView = {
      index: s.index, agent: s.agent, state: s.state, exitCode: s.exitCode, signal: s.signal, startedAt: s.startedAt,
      endedAt: s.endedAt, pid: s.process?.pid ?? null,
      output: s.members ? { text: '', bytes: s.outputBytes, truncated: false } : stepText(paths, s, stepBudget),
      usage: s.usage, costUsd: s.costUsd, error: s.error,
      children: children.filter((c) => c.stepKey === s.key).map((c) => c.runId),
    };
    if (s.changes) v.changes = changesView(s.changes);
    if (s.state === 'failed' && !s.members) v.stderrTail = redactSecrets(readTail(paths.stderr(s.key), STDERR_TAIL_BYTES));
    if (s.members) v.members = s.members.map(view);
    return v;
  };
  if (record.mode === 'parallel' && steps[0]?.members) steps = steps[0].members;
  const stepViews = steps.map(view);
  const runOut = isTerminalRun(status.state)
    ? runText(paths, status, runBudget)
    : { text: '', bytes: 0, truncated: false };
  const meta = readMeta(ctx, record.runId)!;
  const created = Date.parse(record.createdAt);
  const startedMs = status.startedAt ? Date.parse(status.startedAt) : null;
  const endMs = status.endedAt ? Date.parse(status.endedAt) : null;
  const v: RunView = {
    runId: record.runId,
    sessionId: record.sessionId,
    state: status.state,
    mode: record.mode,
    label: record.label,
    cwd: record.cwd,
    createdAt: record.createdAt,
    startedAt: status.startedAt,
    endedAt: status.endedAt,
    durationMs: endMs !== null ? endMs - (startedMs ?? created) : startedMs !== null ? Date.now() - startedMs : null,
    lastActivityAt: lastActivity(paths, status),
    error: status.error,
    steps: stepViews,
    output: { ...runOut, uri: `subagents://runs/${record.runId}/output` },
    fanout: fanoutOf(ctx, record, status),
    pendingAppends: countPendingAppends(record, status, appends),
    adopted: meta.sessionId !== ctx.sessionId && isVisible(ctx, meta) && meta.depth === 0,
    dismissed: ctx.store.isDismissed(record.runId),
    runnerPid: status.runner?.pid ?? null,
  };
  if (status.runnerLogTail) v.runnerLogTail = status.runnerLogTail;
  if (status.survivors.length) v.survivors = status.survivors.map((p) => p.pid);
  if (status.state === 'queued') {
    const q = queueSnapshot(ctx, record.runId);
    if (q) v.queue = q;
  }
  if (status.escaped?.length) v.escaped = status.escaped.map((p) => ({ pid: p.pid, command: p.command }));
  return v;
}

/** The public part of a step's changes (the repository path stays internal). */
export function changesView(c: NonNullable<StepStatus['changes']>): NonNullable<StepView['changes']> {
  return { branch: c.branch, commit: c.commit, base: c.base, files: c.files, insertions: c.insertions, deletions: c.deletions };
}

function stepText(paths: RunPaths, s: StepStatus, budget: number): TextView {
  return cappedText(paths.output(s.key), s, budget);
}

/**
 * The run's output: the text of the last step that ran (a parallel group's: its members' joined, counted as joined).
 * A single step's counts are the step's own, so the run and its step agree past the output cap.
 */
function runText(paths: RunPaths, status: RunStatus, budget: number): TextView {
  const last = [...status.steps].reverse().find((s) => s.startedAt !== null);
  return last && !last.members ? cappedText(paths.runOutput, last, budget) : boundedText(paths.runOutput, budget);
}

/** A step's stored text: the file holds at most the capture cap; the step's own count is what the agent wrote. */
function cappedText(file: string, s: StepStatus, budget: number): TextView {
  const t = boundedText(file, budget, s.outputBytes);
  const bytes = Math.max(t.bytes, s.outputBytes);
  return { ...t, bytes, truncated: t.truncated || s.outputTruncated || bytes > t.bytes };
}

/** The tree's budget while it lives; once it has ended, the agents the whole tree actually started (claims of the rest were returned). */
function fanoutOf(ctx: ManagerContext, record: RunRecord, status: RunStatus): { used: number; limit: number; remaining: number } {
  // A root that has ended answers from its steps even in the moment before its runner returned the tree's claims.
  const live = isTerminalRun(status.state) && record.depth === 0 ? null : fanoutSnapshot(ctx, record.rootRunId);
  if (live) return live;
  const started = (st: RunStatus | null) => {
    let n = 0;
    for (const s of st?.steps ?? []) {
      if (s.members) n += s.members.filter((m) => m.startedAt !== null).length;
      else if (s.startedAt !== null) n++;
    }
    return n;
  };
  const root = record.rootRunId;
  let used = started(root === record.runId ? status : safeRead(ctx, root));
  for (const id of descendants(ctx.store, root)) used += started(id === record.runId ? status : safeRead(ctx, id));
  const limit = record.limits.maxSpawns;
  return { used, limit, remaining: Math.max(0, limit - used) };
}

function safeRead(ctx: ManagerContext, runId: string): RunStatus | null {
  try { return ctx.store.readStatus(runId); } catch { return null; }
}

/** The state listed for a run whose status.json cannot be read: not a run state, and never a terminal one. */
export const UNREADABLE_STATE = 'unreadable';

/** A run's error as listings and notifications show it: code and message, never the agent's words (`detail`). */
export function listedError(e: { code: string; message: string } | null): { code: string; message: string } | null {
  return e === null ? null : { code: e.code, message: e.message };
}

/** `dismissed`: when the caller already knows (a listing looked), else it is looked up. */
export function summarize(ctx: ManagerContext, runId: string, status: Pick<RunStatus, 'state' | 'endedAt' | 'error'> | null, dismissed?: boolean): RunSummary {
  const meta = readMeta(ctx, runId)!;
  return {
    runId,
    sessionId: meta.sessionId,
    // Unreadable is not an end: the run's runner, its single writer, may still be alive and repair the file, and a
    // listed terminal state that later changed would break "terminal is final".
    state: status?.state ?? UNREADABLE_STATE,
    mode: meta.mode,
    label: meta.label,
    agents: meta.agents,
    createdAt: meta.createdAt,
    endedAt: status?.endedAt ?? null,
    error: status ? listedError(status.error) : { code: 'STATE_CORRUPT', message: `status.json of ${runId} is unreadable; status ${runId} says why` },
    adopted: meta.sessionId !== ctx.sessionId && meta.depth === 0,
    dismissed: dismissed ?? ctx.store.isDismissed(runId),
  };
}
