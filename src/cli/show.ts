import fs from 'node:fs';
import { freshStatus } from '../manager/run-status.js';
import type { ManagerContext } from '../manager/context.js';
import { requireRecord } from '../manager/listing.js';
import { renderRun } from '../manager/status-view.js';
import { readRunEvents, withLiveness, type RunEvent } from '../manager/run-files.js';
import type { ProcessIdentity } from '../process/identity.js';
import { TERMINAL_RUN_STATES, type AgentTaskSpec, type StepSpec, type StepStatus } from '../store/run-types.js';
import { durationOf } from './runs.js';
import { formatAge, formatBytes, formatDuration, oneLine } from '../format.js';
import { peopleCommand } from '../invocation.js';

export interface FileInfo { path: string; bytes: number | null }

export interface StepDetail {
  index: number;
  key: string;
  agent: string;
  backend: string | null;
  state: string;
  startedAt: string | null;
  endedAt: string | null;
  durationMs: number | null;
  process: (ProcessIdentity & { alive: boolean }) | null;
  exitCode: number | null;
  signal: string | null;
  outputBytes: number;
  outputTruncated: boolean;
  usage: Record<string, number> | null;
  costUsd: number | null;
  error: { code: string; message: string; detail?: string } | null;
  appendSeq: number | null;
  children: string[];
  files: { output: FileInfo; raw?: FileInfo; stderr?: FileInfo; patch?: FileInfo };
  /** Isolated steps: the branch and what changed. */
  changes?: { branch: string; commit: string; base: string; files: number; insertions: number; deletions: number };
  members?: StepDetail[];
}

export interface RunDetail {
  /** While queued: its place in the queue and the queue's length. */
  queue?: { position: number; length: number };
  runId: string;
  sessionId: string;
  state: string;
  mode: string;
  label: string | null;
  cwd: string;
  depth: number;
  rootRunId: string;
  parentRunId: string | null;
  parentStepKey: string | null;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  durationMs: number | null;
  lastActivityAt: string;
  error: { code: string; message: string; detail?: string } | null;
  dismissed: boolean;
  timeoutMs: number | null;
  killGraceMs: number;
  limits: { maxSpawns: number; maxDepth: number };
  fanout: { used: number; limit: number; remaining: number };
  pendingAppends: number;
  runner: (ProcessIdentity & { alive: boolean }) | null;
  runnerLogTail?: string;
  survivors: ProcessIdentity[];
  escaped: Array<{ pid: number; command: string }>;
  children: string[];
  steps: StepDetail[];
  output: FileInfo;
  files: { dir: string; record: FileInfo; status: FileInfo; events: FileInfo; runnerLog: FileInfo };
  events: RunEvent[];
  /** Lines of the event log that did not parse (skipped: docs/contract.md, invariant 6), shown so the damage is not silent. */
  eventsSkipped: number;
}

function fileInfo(p: string): FileInfo {
  try {
    return { path: p, bytes: fs.lstatSync(p).size };
  } catch {
    return { path: p, bytes: null };
  }
}


/** Everything recorded about one run, for a person: its steps, children, evidence (pids, exit codes, bytes) and file paths. */
export async function runDetail(ctx: ManagerContext, runId: string): Promise<RunDetail> {
  const status = await freshStatus(ctx, runId);
  const record = requireRecord(ctx, runId);
  const paths = ctx.store.paths(runId);
  const view = renderRun(ctx, record, status, 256);
  const appends = ctx.store.readAppends(runId);
  const specs: StepSpec[] = [...record.steps, ...appends.map((a) => a.step)];
  const children = ctx.store.children(runId);
  const step = (st: StepStatus, spec: StepSpec | AgentTaskSpec | undefined): StepDetail => {
    const agentSpec = spec && 'agent' in spec ? spec.agent : null;
    const d: StepDetail = {
      index: st.index, key: st.key, agent: st.agent, backend: agentSpec?.backend ?? null, state: st.state,
      startedAt: st.startedAt, endedAt: st.endedAt, durationMs: durationOf(st.startedAt ?? record.createdAt, st.startedAt ? st : null),
      process: withLiveness(st.process), exitCode: st.exitCode, signal: st.signal, outputBytes: st.outputBytes,
      outputTruncated: st.outputTruncated, usage: st.usage, costUsd: st.costUsd, error: st.error, appendSeq: st.appendSeq,
      children: children.filter((c) => c.stepKey === st.key || c.stepKey.startsWith(`${st.key}.`)).map((c) => c.runId),
      files: { output: fileInfo(paths.output(st.key)) },
    };
    if (st.changes) {
      d.changes = { branch: st.changes.branch, commit: st.changes.commit, base: st.changes.base, files: st.changes.files, insertions: st.changes.insertions, deletions: st.changes.deletions };
      d.files.patch = fileInfo(paths.patch(st.key));
    }
    if (!st.members) {
      const raw = fileInfo(paths.rawOutput(st.key));
      const err = fileInfo(paths.stderr(st.key));
      if (raw.bytes !== null) d.files.raw = raw;
      if (err.bytes !== null) d.files.stderr = err;
    } else {
      const group = spec && 'kind' in spec && spec.kind === 'group' ? spec : null;
      d.members = st.members.map((m, j) => step(m, group?.members[j]));
    }
    return d;
  };
  const steps = status.steps.map((st, i) => step(st, specs[i]));
  const d: RunDetail = {
    runId, sessionId: record.sessionId, state: status.state, mode: record.mode, label: record.label, cwd: record.cwd,
    depth: record.depth, rootRunId: record.rootRunId, parentRunId: record.parentRunId, parentStepKey: record.parentStepKey,
    createdAt: record.createdAt, startedAt: status.startedAt, endedAt: status.endedAt, durationMs: durationOf(record.createdAt, status),
    lastActivityAt: view.lastActivityAt, error: status.error, dismissed: view.dismissed, timeoutMs: record.timeoutMs,
    killGraceMs: record.killGraceMs, limits: record.limits, fanout: view.fanout, pendingAppends: view.pendingAppends,
    runner: withLiveness(status.runner), survivors: status.survivors, escaped: (status.escaped ?? []).map((p) => ({ pid: p.pid, command: p.command })), children: children.map((c) => c.runId), steps,
    output: fileInfo(paths.runOutput),
    files: { dir: paths.dir, record: fileInfo(paths.record), status: fileInfo(paths.status), events: fileInfo(paths.events), runnerLog: fileInfo(paths.runnerLog) },
    ...(({ events, skipped }) => ({ events, eventsSkipped: skipped }))(readRunEvents(ctx, runId)),
  };
  if (status.runnerLogTail) d.runnerLogTail = status.runnerLogTail;
  if (view.queue) d.queue = view.queue;
  return d;
}

/** Pending appended steps the runner has not taken yet are counted in `pendingAppends`, not listed as steps. */
export function renderDetail(d: RunDetail, out: (s: string) => void): void {
  const now = Date.now();
  out(`run ${d.runId}`);
  const kv = (k: string, v: string) => out(`  ${`${k}:`.padEnd(13)}${v}`);
  kv('state', `${d.state}${d.queue ? ` (position ${d.queue.position} of ${d.queue.length} in the queue)` : ''}${d.error ? ` — ${d.error.code}: ${oneLine(d.error.message, 200)}` : ''}${d.dismissed ? ' [dismissed]' : ''}`);
  if (d.error?.detail) kv('agent said', oneLine(d.error.detail, 300));
  kv('mode', `${d.mode}, ${d.steps.length} step${d.steps.length === 1 ? '' : 's'}${d.pendingAppends ? ` (+${d.pendingAppends} appended, pending)` : ''}`);
  if (d.label) kv('label', oneLine(d.label, 200));
  kv('session', d.sessionId);
  if (d.depth > 0) kv('nested', `depth ${d.depth}, in ${d.parentRunId} step ${d.parentStepKey}, tree ${d.rootRunId}`);
  kv('cwd', d.cwd);
  kv('created', `${d.createdAt} (${formatAge(d.createdAt, now)})`);
  if (d.startedAt) kv('started', d.startedAt);
  if (d.endedAt) kv('ended', d.endedAt);
  kv('duration', formatDuration(d.durationMs));
  kv('activity', `${d.lastActivityAt} (${formatAge(d.lastActivityAt, now)})`);
  kv('runner', d.runner ? `pid ${d.runner.pid} (start time ${d.runner.startTime}, ${d.runner.alive ? 'alive' : 'gone'})` : 'not started');
  kv('limits', `fan-out ${d.fanout.used} of ${d.fanout.limit} used; depth limit ${d.limits.maxDepth}; timeout ${d.timeoutMs === null ? 'none' : formatDuration(d.timeoutMs)}; kill grace ${d.killGraceMs} ms`);
  if (d.escaped.length) kv('escaped', d.escaped.map((p) => `pid ${p.pid} (${oneLine(p.command, 80)})`).join(', ') + ' (left the run\'s group and token; stopped by the runner)');
  if (d.survivors.length) kv('survivors', d.survivors.map((p) => `pid ${p.pid}`).join(', ') + ' (could not be killed; their slots stay held)');
  if (d.children.length) kv('children', d.children.join(', '));
  out('');
  out('steps:');
  const stepLine = (s: StepDetail, indent: string, name: string) => {
    const evidence = [
      s.backend ? `backend ${s.backend}` : null,
      s.process ? `pid ${s.process.pid}${s.process.alive ? ' alive' : ''}` : null,
      s.exitCode !== null ? `exit ${s.exitCode}` : null,
      s.signal ? `signal ${s.signal}` : null,
      `${formatBytes(s.outputBytes)} output${s.outputTruncated ? ' (stored copy truncated)' : ''}`,
      s.durationMs !== null ? formatDuration(s.durationMs) : null,
      s.costUsd !== null ? `$${s.costUsd.toFixed(4)}` : null,
    ].filter(Boolean).join(', ');
    out(`${indent}${name} ${s.agent}: ${s.state} — ${evidence}`);
    if (s.error) out(`${indent}  error: ${s.error.code}: ${oneLine(s.error.message, 200)}${s.error.detail ? ` (said: ${oneLine(s.error.detail, 200)})` : ''}`);
    if (s.children.length) out(`${indent}  children: ${s.children.join(', ')}`);
    if (s.changes) {
      const c = s.changes;
      out(`${indent}  branch: ${c.branch} at ${c.commit.slice(0, 12)} (from ${c.base.slice(0, 12)}): ${c.files} file(s), +${c.insertions} -${c.deletions}`);
      if (s.files.patch) out(`${indent}  patch:  ${s.files.patch.path} (${formatBytes(s.files.patch.bytes ?? 0)})`);
    }
    if (!s.members) {
      out(`${indent}  output: ${s.files.output.path}${s.files.output.bytes === null ? ' (not written yet)' : ''}`);
      if (s.files.raw) out(`${indent}  raw:    ${s.files.raw.path} (${formatBytes(s.files.raw.bytes ?? 0)})`);
      if (s.files.stderr) out(`${indent}  stderr: ${s.files.stderr.path} (${formatBytes(s.files.stderr.bytes ?? 0)})`);
    }
    for (const m of s.members ?? []) stepLine(m, `${indent}  `, `#${m.index}`);
  };
  for (const s of d.steps) stepLine(s, '  ', s.members ? `[${s.index}] parallel` : `[${s.index}]`);
  out('');
  out('files:');
  out(`  dir:        ${d.files.dir}`);
  out(`  record:     ${d.files.record.path}`);
  out(`  status:     ${d.files.status.path}`);
  out(`  events:     ${d.files.events.path} (${d.events.length} events${d.eventsSkipped ? `; ${d.eventsSkipped} unparsable line(s) skipped: the file is damaged` : ''})`);
  out(`  runner log: ${d.files.runnerLog.path} (${formatBytes(d.files.runnerLog.bytes ?? 0)})`);
  const noOutput = TERMINAL_RUN_STATES.includes(d.state as never) ? ' (none: its runner ended before writing it; the steps\' output files are above)' : ' (written when the run ends)';
  out(`  output:     ${d.output.path}${d.output.bytes === null ? noOutput : ` (${formatBytes(d.output.bytes)})`}`);
  if (d.runnerLogTail) {
    out('');
    out('runner log tail:');
    for (const l of d.runnerLogTail.trimEnd().split('\n').slice(-10)) out(`  ${oneLine(l, 200)}`);
  }
  const recent = d.events.slice(-8);
  if (recent.length) {
    out('');
    out('recent events:');
    for (const e of recent) {
      const { ts, type, ...rest } = e;
      const extra = Object.entries(rest).map(([k, v]) => `${k}=${typeof v === 'string' ? oneLine(v, 40) : JSON.stringify(v)}`).join(' ');
      out(`  ${ts} ${type}${extra ? ` ${extra}` : ''}`);
    }
  }
  out('');
  out(`Output: ${peopleCommand(`logs ${d.runId}`)}${d.state === 'queued' || d.state === 'starting' || d.state === 'running' ? ' --follow' : ''}`);
}

