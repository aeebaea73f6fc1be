import { isSubagentError } from '../errors.js';
import { isRunId } from '../ids.js';
import type { RunSummary, RunView, StepView as StatusStepView } from '../manager/status-view.js';
import { isTerminalRun, type RunState } from '../store/run-types.js';
import { HomeModel, type Gauges, type RunDetail, type RunRow, type StepView } from './model.js';

const EVENTS_SHOWN = 300;
const EVENTS_READ_BYTES = 4 * 1024 * 1024;

function rowOf(s: RunSummary): RunRow {
  return {
    runId: s.runId, sessionId: s.sessionId, rootRunId: s.runId, parentRunId: null, parentStepKey: null, depth: 0,
    mode: s.mode, agents: [...new Set(s.agents)], label: s.label, state: s.state, error: s.error, createdAt: s.createdAt,
    startedAt: null, endedAt: s.endedAt, costUsd: null, dismissed: s.dismissed,
  };
}

/** The step keys of a status view: a parallel run lists its group's members, a chain its steps and their members. */
function stepsOf(v: RunView): StepView[] {
  const view = (s: StatusStepView, key: string): StepView => ({
    key, agent: s.agent, state: s.state, startedAt: s.startedAt, endedAt: s.endedAt, exitCode: s.exitCode, signal: s.signal,
    pid: s.pid, pidStartTime: null, usage: s.usage, costUsd: s.costUsd, error: s.error, outputBytes: s.output.bytes,
    outputTruncated: s.output.truncated, ...(s.members ? { members: s.members.map((m) => view(m, `${key}.${m.index}`)) } : {}),
  });
  return v.mode === 'parallel' ? v.steps.map((s) => view(s, `0.${s.index}`)) : v.steps.map((s) => view(s, String(s.index)));
}

function costOf(steps: StepView[]): number | null {
  let total: number | null = null;
  for (const s of steps) for (const x of s.members ?? [s]) if (typeof x.costUsd === 'number') total = (total ?? 0) + x.costUsd;
  return total;
}

/**
 * The dashboard's model over Redis (docs/watch-and-ui.md, "The dashboard over Redis"): every run of the deployment, read through
 * the distributed use cases (the command line's view: every session), a run read again when the feed of run events
 * names it. The tree, its filters and pages are the local model's; a run page and an output tail are read from Redis.
 */
export class RedisModel extends HomeModel {
  private cachedGauges: Gauges = { active: 0, activeLimit: 0, agents: 0, agentsLimit: 0, queued: 0, runs: 0, damaged: 0 };

  /**
   * `scope`: `all`, the command line's view (every session's runs); `session`, an MCP session's view (its runs and
   * those of the sessions it restored: any other run answers not found, as every tool does).
   */
  constructor(ctx: ConstructorParameters<typeof HomeModel>[0], private readonly scopeOf: 'all' | 'session' = 'all') {
    super(ctx);
  }

  private get d() { return this.ctx.distributed!; }

  override load(): void { /* loadRemote() */ }

  /** Reads the runs in scope (again: runs that are gone are dropped), and the gauges. */
  async loadRemote(): Promise<void> {
    let summaries: RunSummary[];
    if (this.scopeOf === 'all') summaries = await this.d.everyRun(true);
    else {
      const a = await this.d.status(this.ctx, { all: true }, { signal: new AbortController().signal });
      summaries = a.kind === 'list' ? a.runs : [];
    }
    this.rows.clear();
    for (const s of summaries) this.rows.set(s.runId, rowOf(s));
    this.shape = null;
    await this.refreshGauges();
  }

  async refreshGauges(): Promise<void> {
    const h = await this.d.health();
    this.cachedGauges = {
      active: h.active ?? 0, activeLimit: this.ctx.settings.maxActiveRuns, agents: h.agents ?? 0,
      agentsLimit: this.ctx.settings.maxAgents, queued: h.queued ?? 0, runs: this.rows.size, damaged: 0,
    };
  }

  override gauges(): Gauges { return { ...this.cachedGauges, runs: this.rows.size }; }

  /** Ended runs change only by a dismissal or a removal, which the feed reports: nothing to audit. */
  override audit(): string[] { return []; }
  override async saveCache(): Promise<void> { /* no cache: Redis is the one copy */ }

  /** The run's status view, or null when it is gone (its row dropped). */
  private async view(runId: string): Promise<RunView | null> {
    try {
      const a = await this.d.status(this.ctx, { runId, outputBytes: 1024 }, { signal: new AbortController().signal });
      return a.kind === 'run' ? a : null;
    } catch (e) {
      if (isSubagentError(e) && e.code === 'RUN_NOT_FOUND') {
        if (this.rows.delete(runId)) this.shape = null;
        return null;
      }
      throw e;
    }
  }

  private update(v: RunView): RunRow {
    let row = this.rows.get(v.runId);
    const steps = stepsOf(v);
    if (!row) {
      row = rowOf({ runId: v.runId, sessionId: v.sessionId, state: v.state, mode: v.mode, label: v.label, createdAt: v.createdAt, endedAt: v.endedAt, error: v.error, dismissed: v.dismissed, adopted: false,
        agents: steps.flatMap((s) => (s.members ?? [s]).map((x) => x.agent)) });
      this.rows.set(v.runId, row);
      this.shape = null;
    }
    row.state = v.state; row.error = v.error ? { code: v.error.code, message: v.error.message } : null;
    row.startedAt = v.startedAt; row.endedAt = v.endedAt; row.costUsd = costOf(steps); row.dismissed = v.dismissed;
    return row;
  }

  /** Reads the run again from Redis (drops it when it is gone). */
  async refreshRemote(runId: string): Promise<void> {
    if (!isRunId(runId)) return;
    const v = await this.view(runId);
    if (v) this.update(v);
  }

  async detailRemote(runId: string): Promise<RunDetail | null> {
    if (!isRunId(runId)) return null;
    const v = await this.view(runId);
    if (!v) return null;
    const run = this.update(v);
    const { buf } = await this.d.readBytes(this.ctx, runId, 'events', 0, EVENTS_READ_BYTES);
    const events: Array<{ ts: string; type: string; fields: Record<string, unknown> }> = [];
    let skipped = 0;
    for (const line of buf.toString('utf8').split('\n')) {
      if (!line.trim()) continue;
      try {
        const { ts, type, ...fields } = JSON.parse(line) as Record<string, unknown>;
        events.push({ ts: String(ts ?? ''), type: String(type ?? ''), fields });
      } catch { skipped++; }
    }
    return {
      run, cwd: v.cwd, timeoutMs: null, runner: null, steps: stepsOf(v), survivors: [], pendingAppends: v.pendingAppends,
      children: [], events: events.slice(-EVENTS_SHOWN), eventsSkipped: skipped + Math.max(0, events.length - EVENTS_SHOWN),
      files: {}, now: new Date().toISOString(),
    };
  }

  async outputTailRemote(runId: string, key: string, maxBytes: number): Promise<{ key: string; text: string; bytes: number; from: number } | null> {
    if (!isRunId(runId) || !/^\d{1,6}(\.\d{1,6})?$/.test(key)) return null;
    try {
      const { size } = await this.d.readBytes(this.ctx, runId, { step: key }, 0, 1);
      const from = Math.max(0, size - maxBytes);
      const { buf } = await this.d.readBytes(this.ctx, runId, { step: key }, from, size - from);
      let text = buf.toString('utf8');
      if (from > 0) text = text.replace(/^[\udc00-\udfff\ufffd]+/, ''); // a character cut in half at the start
      return { key, text, bytes: size, from };
    } catch (e) {
      if (isSubagentError(e) && e.code === 'RUN_NOT_FOUND') return null;
      throw e;
    }
  }

  /** Runs whose output may be growing (running on a worker): the page following one is told at each tick. */
  running(): string[] {
    return [...this.rows.values()].filter((r) => !isTerminalRun(r.state as RunState) && r.state !== 'queued').map((r) => r.runId);
  }
}
