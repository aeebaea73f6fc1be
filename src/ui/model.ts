import fs from 'node:fs';
import { isRunId } from '../ids.js';
import type { ManagerContext } from '../manager/context.js';
import { listedError } from '../manager/status-view.js';
import { readEvents } from '../store/event-log.js';
import { openStateFile } from '../store/state-file.js';
import { isTerminalRun, type RunRecord, type RunStatus, type StepStatus } from '../store/run-types.js';
import type { RowCache } from './row-cache.js';

/** One run as the dashboard lists it. Labels and agent names are untrusted text: the page renders them as text. */
export interface RunRow {
  runId: string;
  sessionId: string;
  rootRunId: string;
  parentRunId: string | null;
  parentStepKey: string | null;
  depth: number;
  mode: string;
  agents: string[];
  label: string | null;
  /** A run state, or `corrupt` when its status file cannot be read. */
  state: string;
  error: { code: string; message: string } | null;
  createdAt: string;
  startedAt: string | null;
  endedAt: string | null;
  costUsd: number | null;
  dismissed: boolean;
}

export interface TreeNode { run: RunRow; children: TreeNode[] }

export interface Gauges {
  active: number; activeLimit: number;
  agents: number; agentsLimit: number;
  queued: number;
  runs: number; damaged: number;
}

export interface ListQuery {
  state?: string; session?: string; agent?: string; q?: string; all?: boolean; page?: number; pageSize?: number;
}

export interface ListPage {
  trees: TreeNode[]; total: number; page: number; pageSize: number; pages: number;
  sessions: string[]; agents: string[]; gauges: Gauges; now: string;
}

const ACTIVE_STATES = new Set(['queued', 'starting', 'running']);
const newestFirst = (a: RunRow, b: RunRow) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0);

interface Shape { roots: RunRow[]; byParent: Map<string, RunRow[]>; sessions: string[]; agents: string[] }
export const MAX_PAGE_SIZE = 200;
const EVENTS_SHOWN = 300;

function sumCost(steps: StepStatus[]): number | null {
  let total: number | null = null;
  for (const s of steps) {
    for (const x of s.members ?? [s]) if (typeof x.costUsd === 'number') total = (total ?? 0) + x.costUsd;
  }
  return total;
}

function agentsOf(record: RunRecord): string[] {
  const names: string[] = [];
  for (const s of record.steps) {
    if (s.kind === 'agent') names.push(s.agent.name);
    else for (const m of s.members) names.push(m.agent.name);
  }
  return [...new Set(names)];
}

/**
 * Every run of the home, in memory, as the dashboard shows it: records read once (they never change), statuses
 * again only when the home feed says a run changed, ended runs never again (terminal is final).
 */
export class HomeModel {
  protected readonly rows = new Map<string, RunRow>();
  /** Run directories whose record could not be read (damaged or being created): counted, not listed. */
  private readonly damaged = new Set<string>();
  /** Rows taken from the cache whose dismissal is not looked at yet (rows say "not dismissed" meanwhile). */
  private readonly unchecked = new Set<string>();
  /** Ended rows the cache does not hold yet. */
  private cacheBehind = false;
  /** Where the round-robin audit of ended runs goes on. */
  private auditAt = 0;
  /** The top-level runs of the last page served. */
  private lastShown: string[] = [];
  /** `shapeOf`'s answer until a run comes or goes. */
  protected shape: Shape | null = null;

  /**
   * `scope`: the runs this view may show. The command line's dashboard shows the whole home (the person owns it); an
   * MCP session's view shows the runs that session sees, and no other run exists for it. `cache`: rows of ended runs
   * kept between starts (the command line's dashboard).
   */
  constructor(protected readonly ctx: ManagerContext, private readonly scope?: ModelScope, private readonly cache?: RowCache) {}

  load(): void {
    const cached = this.cache?.read() ?? new Map<string, RunRow>();
    for (const runId of this.scope?.runIds() ?? this.ctx.store.listRunIds()) {
      const c = cached.get(runId);
      if (c && isTerminalRun(c.state as RunStatus['state'])) {
        this.rows.set(runId, { ...c, dismissed: false });
        this.unchecked.add(runId);
        this.shape = null;
      } else {
        this.refresh(runId);
      }
    }
  }

  /** Catches up without a feed (the MCP view, asked now and then): new runs, active runs read again, removed ones dropped. */
  sync(): void {
    const ids = new Set(this.scope?.runIds() ?? this.ctx.store.listRunIds());
    for (const runId of this.rows.keys()) if (!ids.has(runId)) { this.rows.delete(runId); this.shape = null; }
    for (const runId of ids) {
      const row = this.rows.get(runId);
      if (!row || !isTerminalRun(row.state as RunStatus['state'])) this.refresh(runId);
    }
  }

  /** An ended run this model has read: the home feed need not look at it (terminal is final). */
  settled(runId: string): boolean {
    const row = this.rows.get(runId);
    return row !== undefined && isTerminalRun(row.state as RunStatus['state']);
  }

  private allowed(runId: string): boolean {
    return isRunId(runId) && (this.scope?.allows(runId) ?? true);
  }

  /** Reads the run again (or drops it when it is gone). */
  refresh(runId: string): void {
    if (!isRunId(runId)) return;
    const dir = this.ctx.store.paths(runId).dir;
    if (!fs.existsSync(dir)) {
      if (this.rows.delete(runId)) this.shape = null;
      this.damaged.delete(runId); this.unchecked.delete(runId);
      return;
    }
    let row = this.rows.get(runId);
    if (!row) {
      let record: RunRecord | null = null;
      try { record = this.ctx.store.readRecord(runId); } catch { record = null; }
      if (!record || record.runId !== runId) { this.damaged.add(runId); return; }
      this.damaged.delete(runId);
      row = {
        runId, sessionId: record.sessionId, rootRunId: record.rootRunId, parentRunId: record.parentRunId,
        parentStepKey: record.parentStepKey, depth: record.depth, mode: record.mode, agents: agentsOf(record),
        label: record.label, state: 'starting', error: null, createdAt: record.createdAt, startedAt: null, endedAt: null,
        costUsd: null, dismissed: false,
      };
      this.rows.set(runId, row);
      this.shape = null;
    }
    const wasEnded = isTerminalRun(row.state as RunStatus['state']);
    try {
      const s = this.ctx.store.readStatus(runId);
      if (s) {
        row.state = s.state; row.error = listedError(s.error); row.startedAt = s.startedAt; row.endedAt = s.endedAt; row.costUsd = sumCost(s.steps);
      } else {
        row.state = 'corrupt'; row.error = { code: 'STATE_CORRUPT', message: `status.json of ${runId} is missing` };
      }
    } catch (e) {
      row.state = 'corrupt';
      row.error = { code: 'STATE_CORRUPT', message: (e as Error).message.slice(0, 300) };
    }
    if (!wasEnded && isTerminalRun(row.state as RunStatus['state'])) this.cacheBehind = true;
    row.dismissed = this.ctx.store.isDismissed(runId);
    this.unchecked.delete(runId);
  }

  private checkDismissed(row: RunRow): void {
    row.dismissed = this.ctx.store.isDismissed(row.runId);
    this.unchecked.delete(row.runId);
  }

  /**
   * Looks at up to `count` runs for a dismissal by another process (ended runs have no file watch), first the rows
   * taken from the cache, then round robin over the top-level runs (what the tree hides when dismissed). Returns the
   * runs found dismissed. Removals are the home feed's (`runs/`).
   */
  audit(count: number): string[] {
    const changed: string[] = [];
    let budget = count;
    const look = (row: RunRow) => { budget--; if (row.dismissed) return; this.checkDismissed(row); if (row.dismissed) changed.push(row.runId); };
    // The runs a page showed last come first: a dismissal elsewhere of a run on screen shows at the next tick.
    for (const runId of this.lastShown) { const r = this.rows.get(runId); if (r) { budget++; look(r); } }
    for (const runId of this.unchecked) {
      if (budget <= 0) break;
      const r = this.rows.get(runId);
      if (r) look(r); else this.unchecked.delete(runId);
    }
    if (budget <= 0) return changed;
    const { roots } = this.shapeOf();
    const n = Math.min(budget, roots.length);
    for (let i = 0; i < n; i++) look(roots[(this.auditAt + i) % roots.length]!);
    this.auditAt = roots.length ? (this.auditAt + n) % roots.length : 0;
    return changed;
  }

  /** Writes the ended rows to the cache when it lacks some. */
  async saveCache(): Promise<void> {
    if (!this.cache || !this.cacheBehind) return;
    this.cacheBehind = false;
    const ended = [...this.rows.values()].filter((r) => isTerminalRun(r.state as RunStatus['state']));
    await this.cache.write(ended).catch(() => { this.cacheBehind = true; });
  }

  row(runId: string): RunRow | undefined { return this.rows.get(runId); }

  gauges(): Gauges {
    const l = this.ctx.ledger.peek();
    let queued = 0;
    let active = 0;
    for (const r of this.rows.values()) {
      if (r.state === 'queued') queued++;
      if (r.depth === 0 && ACTIVE_STATES.has(r.state) && r.state !== 'queued') active++;
    }
    return {
      active: l ? Object.keys(l.roots).length : active, activeLimit: this.ctx.settings.maxActiveRuns,
      agents: l ? Object.keys(l.agents).length : 0, agentsLimit: this.ctx.settings.maxAgents,
      queued, runs: this.rows.size, damaged: this.damaged.size,
    };
  }

  /** Top-level runs newest first, each with its nested runs, filtered (a tree shows when any of its runs matches), paged. */
  /** Roots newest first, children by parent, sessions and agents: rebuilt only when runs come or go (rows change in place). */
  private shapeOf(): Shape {
    if (this.shape) return this.shape;
    const byParent = new Map<string, RunRow[]>();
    const roots: RunRow[] = [];
    const sessions = new Set<string>();
    const agents = new Set<string>();
    for (const r of this.rows.values()) {
      if (r.depth === 0 || !r.parentRunId || !this.rows.has(r.parentRunId)) roots.push(r);
      else {
        const list = byParent.get(r.parentRunId) ?? [];
        list.push(r);
        byParent.set(r.parentRunId, list);
      }
      if (r.depth === 0) sessions.add(r.sessionId);
      for (const a of r.agents) agents.add(a);
    }
    for (const kids of byParent.values()) kids.sort((a, b) => -newestFirst(a, b));
    this.shape = { roots: roots.sort(newestFirst), byParent, sessions: [...sessions].sort(), agents: [...agents].sort() };
    return this.shape;
  }

  /** Top-level runs newest first, each with its nested runs, filtered (a tree shows when any of its runs matches), paged. */
  list(q: ListQuery): ListPage {
    const pageSize = Math.min(MAX_PAGE_SIZE, Math.max(1, Math.floor(q.pageSize ?? 50)));
    const { roots, byParent, sessions, agents } = this.shapeOf();
    const build = (r: RunRow, seen: Set<string>): TreeNode => {
      seen.add(r.runId);
      const kids = (byParent.get(r.runId) ?? []).filter((k) => !seen.has(k.runId));
      return { run: r, children: kids.map((k) => build(k, seen)) };
    };
    const text = q.q?.trim().toLowerCase() ?? '';
    const filtered = (q.state !== undefined && q.state !== 'all') || !!q.session || !!q.agent || !!text;
    const matches = (r: RunRow): boolean => {
      if (q.state && q.state !== 'all') {
        if (q.state === 'active' ? !ACTIVE_STATES.has(r.state) : q.state === 'ended' ? !isTerminalRun(r.state as RunStatus['state']) : r.state !== q.state) return false;
      }
      if (q.session && !r.sessionId.startsWith(q.session)) return false;
      if (q.agent && !r.agents.includes(q.agent)) return false;
      if (text && !(r.label ?? '').toLowerCase().includes(text) && !r.runId.toLowerCase().startsWith(text)) return false;
      return true;
    };
    const anyMatch = (n: TreeNode): boolean => matches(n.run) || n.children.some(anyMatch);
    // Without a filter every tree matches: only the page's trees are built.
    const shown: Array<RunRow | TreeNode> = [];
    const wanted = Math.max(1, Math.floor(q.page ?? 1)) * pageSize;
    for (const r of roots) {
      // A cached row's dismissal is looked at when the page needs it (the audit gets to the others).
      if (!q.all && this.unchecked.has(r.runId) && shown.length <= wanted) this.checkDismissed(r);
      if (!q.all && r.dismissed) continue;
      if (!filtered) { shown.push(r); continue; }
      const tree = build(r, new Set());
      if (anyMatch(tree)) shown.push(tree);
    }
    const pages = Math.max(1, Math.ceil(shown.length / pageSize));
    const page = Math.min(pages, Math.max(1, Math.floor(q.page ?? 1)));
    const trees = shown.slice((page - 1) * pageSize, page * pageSize).map((x) => ('run' in x ? x : build(x, new Set())));
    this.lastShown = trees.map((t) => t.run.runId);
    return { trees, total: shown.length, page, pageSize, pages, sessions, agents, gauges: this.gauges(), now: new Date().toISOString() };
  }

  /** Everything the run page shows, or null when the run is gone (removed while its page is open) or unreadable. */
  detail(runId: string): RunDetail | null {
    if (!this.allowed(runId)) return null;
    this.refresh(runId);
    const row = this.rows.get(runId);
    if (!row) return null;
    const paths = this.ctx.store.paths(runId);
    let record: RunRecord | null = null;
    let status: RunStatus | null = null;
    try { record = this.ctx.store.readRecord(runId); } catch { /* shown as damaged */ }
    try { status = this.ctx.store.readStatus(runId); } catch { /* row says corrupt */ }
    const { events, skipped } = readEvents(paths.events);
    const children = [...this.rows.values()].filter((r) => r.parentRunId === runId)
      .map((r) => ({ runId: r.runId, stepKey: r.parentStepKey, state: r.state, agents: r.agents, label: r.label }));
    let pendingAppends = 0;
    try { pendingAppends = fs.readdirSync(paths.appendsDir).filter((n) => /^\d{6}\.json$/.test(n)).length - (status?.appendsTaken ?? 0); } catch { /* none */ }
    const step = (s: StepStatus): StepView => ({
      key: s.key, agent: s.agent, state: s.state, startedAt: s.startedAt, endedAt: s.endedAt, exitCode: s.exitCode,
      signal: s.signal, pid: s.process?.pid ?? null, pidStartTime: s.process?.startTime ?? null, usage: s.usage,
      costUsd: s.costUsd, error: s.error, outputBytes: s.outputBytes, outputTruncated: s.outputTruncated,
      members: s.members?.map(step),
    });
    return {
      run: row,
      cwd: record?.cwd ?? null,
      timeoutMs: record?.timeoutMs ?? null,
      runner: status?.runner ? { pid: status.runner.pid, startTime: status.runner.startTime } : null,
      steps: status?.steps.map(step) ?? [],
      survivors: status?.survivors.map((p) => p.pid) ?? [],
      pendingAppends: Math.max(0, pendingAppends),
      children,
      events: events.slice(-EVENTS_SHOWN).map((e) => {
        const { ts, type, ...fields } = e;
        return { ts, type, fields };
      }),
      eventsSkipped: skipped + Math.max(0, events.length - EVENTS_SHOWN),
      files: { dir: paths.dir, status: paths.status, events: paths.events, runnerLog: paths.runnerLog, out: paths.outDir },
      now: new Date().toISOString(),
    };
  }

  /** The last `maxBytes` of a step's output (on a character boundary), with the file's size. */
  outputTail(runId: string, key: string, maxBytes: number): { key: string; text: string; bytes: number; from: number } | null {
    if (!this.allowed(runId) || !/^\d{1,6}(\.\d{1,6})?$/.test(key)) return null;
    const file = this.ctx.store.paths(runId).output(key);
    // Never blocks on a FIFO in the file's place (the MCP App's server would block with it); such damage is STATE_CORRUPT.
    const opened = openStateFile(file, `the output of step ${key} of ${runId}`);
    if (opened === null) return { key, text: '', bytes: 0, from: 0 };
    const { fd, size } = opened;
    try {
      const from = Math.max(0, size - Math.max(0, maxBytes));
      const buf = Buffer.alloc(size - from);
      const n = fs.readSync(fd, buf, 0, buf.length, from);
      let text = buf.subarray(0, n).toString('utf8');
      if (from > 0) text = text.replace(/^[\udc00-\udfff\ufffd]+/, ''); // a character cut in half at the start
      return { key, text, bytes: size, from };
    } finally {
      fs.closeSync(fd);
    }
  }
}

export interface ModelScope {
  runIds: () => string[];
  allows: (runId: string) => boolean;
}

export interface StepView {
  key: string; agent: string; state: string; startedAt: string | null; endedAt: string | null;
  exitCode: number | null; signal: string | null; pid: number | null; pidStartTime: string | null;
  usage: Record<string, number> | null; costUsd: number | null; error: { code: string; message: string } | null;
  outputBytes: number; outputTruncated: boolean; members?: StepView[];
}

export interface RunDetail {
  run: RunRow;
  cwd: string | null;
  timeoutMs: number | null;
  runner: { pid: number; startTime: string } | null;
  steps: StepView[];
  survivors: number[];
  pendingAppends: number;
  children: Array<{ runId: string; stepKey: string | null; state: string; agents: string[]; label: string | null }>;
  events: Array<{ ts: string; type: string; fields: Record<string, unknown> }>;
  eventsSkipped: number;
  files: Record<string, string>;
  now: string;
}
