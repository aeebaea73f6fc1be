import fs from 'node:fs';
import { isRunId } from '../ids.js';
import { dirSignature } from '../store/dir-snapshot.js';
import { isTerminalRun, type RunStatus } from '../store/run-types.js';
import { openStateFile } from '../store/state-file.js';
import type { ManagerContext } from './context.js';
import { readMeta, type RunMeta } from './listing.js';
import { reconcileRun } from './reconcile.js';
import { CoalescedRun, DirWatch } from '../wait.js';

/**
 * One line of a run's event log, placed in the home's order. The cursor names the line exactly (its time, its run,
 * its byte offset in that run's `events.jsonl`), so a reader resumes after it without a home-wide journal.
 */
export interface HomeEvent {
  cursor: string;
  ts: string;
  type: string;
  runId: string;
  sessionId: string;
  rootRunId: string;
  parentRunId: string | null;
  depth: number;
  /** The event's own fields (step, agent, state, exitCode …), as the runner or server wrote them. */
  fields: Record<string, unknown>;
}

export interface Cursor { tsMs: number; runId: string; offset: number }

const CURSOR_RE = /^(\d{1,15})\.(r-[A-Za-z0-9_-]{24})\.(\d{1,15})$/;

export function formatCursor(c: Cursor): string {
  return `${c.tsMs}.${c.runId}.${c.offset}`;
}

export function parseCursor(s: string): Cursor | null {
  const m = CURSOR_RE.exec(s.trim());
  return m ? { tsMs: Number(m[1]), runId: m[2]!, offset: Number(m[3]) } : null;
}

/** The home's order: time, then run id, then position in the run's log. */
export function compareCursors(a: Cursor, b: Cursor): number {
  if (a.tsMs !== b.tsMs) return a.tsMs - b.tsMs;
  if (a.runId !== b.runId) return a.runId < b.runId ? -1 : 1;
  return a.offset - b.offset;
}

/**
 * How far a log file's mtime may trail the times written in it: a line's time is taken just before its write, and
 * the kernel stamps files with a coarse clock. A log last changed more than this before a cursor holds nothing after it.
 */
const MTIME_SLACK_MS = 2000;

/** New output is announced at most this often per feed. */
const OUTPUT_GAP_MS = 250;

/**
 * How long a line is held past its writer's time (or past its reading, if that is later) before `onEvents` gets it:
 * lines of several runs reach the feed in different scans, a file event or a poll apart, and are handed on in cursor
 * order only once no earlier line can still be on its way. Without it, a watcher that stopped after a line and
 * resumed from its cursor would miss a line of another run read a moment later with an earlier time.
 */
const ORDER_HOLD_MS = 1000;

/** How long a run that ended is still followed for the line that logs its end. */
const END_LINE_GRACE_MS = 10_000;

/** Lines that end a run in its log: the runner's, a reconciliation's, a failed handshake's, the canceller's. */
const END_TYPES = new Set(['ended', 'reconciled', 'handshake-failed']);

/** Where each run's log is read from next, and what the follower knows of the run. */
interface Followed {
  offset: number;
  meta: RunMeta | null;
  /** Followed: not terminal, or terminal so recently that the log's last line may still be on its way. */
  active: boolean;
  /** The log has a line that ends the run (the runner writes it just after the terminal status). */
  sawEnd: boolean;
  watcher: DirWatch | null;
  outWatcher: DirWatch | null;
}

export interface FeedOptions {
  /** Replay every event after this cursor first; null: only what happens from now on; 'start': the whole history. */
  since: Cursor | 'start' | null;
  /**
   * Events, in the home's order: each line is handed on about ORDER_HOLD_MS after it was written, once every earlier
   * line has come; a line read later than that (a machine stalled for longer) is handed on as soon as it is read.
   */
  onEvents?: (events: HomeEvent[]) => void;
  /** Runs whose files changed (status, new run, removed run, new output), at most once per scan each. */
  onChange?: (runIds: string[], o: { output: string[] }) => void;
  /** Runs known to have ended and logged their end (the caller read them): with `since: null` they are not read at all. */
  settled?: (runId: string) => boolean;
  /** The backing check of active runs (file events are the fast path). */
  pollMs?: number;
  /** The feed's poll keeps the process alive (`watch`, which has nothing else to; a server has its transport). */
  holdsProcess?: boolean;
}

/**
 * Follows every run of the state home: new runs through `runs/`, the active ones through a watch on their directory
 * (and their `out/`), with a slow poll of the active runs behind it (which also reconciles: a dead runner writes
 * nothing). Ended runs are never read again; a run removed under it (gc) is dropped.
 */
export class HomeFeed {
  private readonly runs = new Map<string, Followed>();
  /** The runs followed now (what the poll reads): a few, however many runs the home holds. */
  private readonly activeIds = new Set<string>();
  private dirWatcher: DirWatch | null = null;
  private timer: NodeJS.Timeout | null = null;
  private runsSig: string | null = null;
  /** One scan at a time, bursts of pokes coalesced (src/wait.ts); `reconcileNext` says what the next scan must do. */
  private readonly scans = new CoalescedRun(() => {
    const reconcile = this.reconcileNext;
    this.reconcileNext = false;
    if (!this.stopped) this.scan(reconcile);
  });
  private reconcileNext = false;
  private wantNames = true;
  private wantAll = true;
  private readonly dirty = new Set<string>();
  private readonly outputDirty = new Set<string>();
  private stopped = false;
  private lastOutputMs = -Infinity;
  private outputTimer: NodeJS.Timeout | null = null;
  /** Lines read and not handed on yet (ORDER_HOLD_MS), in cursor order; `readMs` on the monotonic clock. */
  private held: Array<{ at: Cursor; readMs: number; event: HomeEvent }> = [];
  private holdTimer: NodeJS.Timeout | null = null;

  constructor(private readonly ctx: ManagerContext, private readonly o: FeedOptions) {}

  /**
   * Reads the history the options ask for (its lines older than ORDER_HOLD_MS are delivered before this resolves, the
   * rest follow in order), then follows.
   */
  async start(): Promise<void> {
    // Unwatchable: the poll finds new runs.
    this.dirWatcher = new DirWatch([this.ctx.layout.runsDir], undefined, () => { this.wantNames = true; this.poke(); });
    this.prime();
    this.timer = setInterval(() => {
      if (dirSignature(this.ctx.layout.runsDir) !== this.runsSig) this.wantNames = true;
      this.wantAll = true;
      this.poke(true);
    }, this.o.pollMs ?? 1000);
    if (!this.o.holdsProcess) this.timer.unref();
  }

  stop(): void {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    if (this.outputTimer) clearTimeout(this.outputTimer);
    if (this.holdTimer) clearTimeout(this.holdTimer);
    this.held = []; // never handed on: a watcher resuming from its last line's cursor reads them
    this.dirWatcher?.close();
    for (const f of this.runs.values()) { f.watcher?.close(); f.outWatcher?.close(); }
    this.runs.clear();
    this.activeIds.clear();
  }

  /** The runs the feed knows, with whether each is still active. */
  known(): Array<{ runId: string; active: boolean }> {
    return [...this.runs].map(([runId, f]) => ({ runId, active: f.active }));
  }

  /** The first look: every run's offset, the replayed history, and a watch on each active run. */
  private prime(): void {
    this.runsSig = dirSignature(this.ctx.layout.runsDir);
    const since = this.o.since;
    const replay: HomeEvent[] = [];
    for (const runId of this.ctx.store.listRunIds()) {
      const f: Followed = { offset: 0, meta: null, active: false, sawEnd: false, watcher: null, outWatcher: null };
      this.runs.set(runId, f);
      if (since === null && this.o.settled?.(runId)) { f.sawEnd = true; continue; } // ended: never read again
      const file = this.ctx.store.paths(runId).events;
      let size = 0;
      let mtimeMs = 0;
      try { const st = fs.statSync(file); size = st.size; mtimeMs = st.mtimeMs; } catch { /* no log yet */ }
      if (since === null || (since !== 'start' && mtimeMs < since.tsMs - MTIME_SLACK_MS)) {
        f.offset = size;
      } else {
        const evs = this.readFrom(runId, f);
        replay.push(...(since === 'start' ? evs : evs.filter((e) => compareCursors(parseCursor(e.cursor)!, since) > 0)));
      }
      this.refreshActive(runId, f);
    }
    this.deliver(replay, [], []);
  }

  private poke(reconcile = false): void {
    if (this.stopped) return;
    if (reconcile) this.reconcileNext = true;
    this.scans.request();
  }

  private pokeOutput(): void {
    const waitMs = OUTPUT_GAP_MS - (performance.now() - this.lastOutputMs);
    if (waitMs <= 0) { this.poke(); return; }
    this.outputTimer ??= setTimeout(() => { this.outputTimer = null; this.poke(); }, waitMs);
  }

  private scan(reconcile: boolean): void {
    if (this.stopped) return;
    const events: HomeEvent[] = [];
    const changed = new Set<string>();
    if (this.wantNames) {
      this.wantNames = false;
      this.runsSig = dirSignature(this.ctx.layout.runsDir);
      const names = new Set(this.ctx.store.listRunIds());
      for (const [runId, f] of this.runs) {
        if (names.has(runId)) continue;
        f.watcher?.close(); f.outWatcher?.close();
        this.runs.delete(runId); // removed (gc): nothing more will come from it
        this.activeIds.delete(runId);
        changed.add(runId);
      }
      for (const runId of names) {
        if (this.runs.has(runId)) continue;
        const f: Followed = { offset: 0, meta: null, active: true, sawEnd: false, watcher: null, outWatcher: null };
        this.runs.set(runId, f);
        events.push(...this.readFrom(runId, f)); // a new run: every line of its log is new
        this.refreshActive(runId, f);
        changed.add(runId);
      }
    }
    const all = this.wantAll;
    this.wantAll = false;
    const ids = all ? [...this.activeIds] : [...this.dirty];
    this.dirty.clear();
    for (const runId of ids) {
      const f = this.runs.get(runId);
      if (!f) continue;
      const evs = this.readFrom(runId, f);
      events.push(...evs);
      if (evs.length) changed.add(runId);
      const was = f.active;
      this.refreshActive(runId, f, reconcile);
      if (was !== f.active) changed.add(runId);
      if (!all) changed.add(runId); // a file event in its directory: its status may have changed
    }
    // New output is announced at most every OUTPUT_GAP_MS: an agent that writes all the time would otherwise make a
    // scan, and a message to every page, per write.
    let output: string[] = [];
    if (this.outputDirty.size && performance.now() - this.lastOutputMs >= OUTPUT_GAP_MS) {
      output = [...this.outputDirty];
      this.outputDirty.clear();
      this.lastOutputMs = performance.now();
    } else if (this.outputDirty.size) {
      this.pokeOutput();
    }
    this.deliver(events, [...changed], output);
  }

  private deliver(events: HomeEvent[], changed: string[], output: string[]): void {
    if (events.length && this.o.onEvents) {
      const readMs = performance.now();
      for (const event of events) {
        const at = parseCursor(event.cursor);
        if (at) this.held.push({ at, readMs, event }); // always: readFrom makes only cursors that parse
      }
      this.held.sort((a, b) => compareCursors(a.at, b.at));
      this.release();
    }
    if (changed.length || output.length) this.o.onChange?.(changed, { output });
  }

  /** Hands on the held lines, in cursor order, up to the first one still inside its hold; then waits for that one. */
  private release(): void {
    if (this.holdTimer) { clearTimeout(this.holdTimer); this.holdTimer = null; }
    if (this.stopped) return;
    const upToMs = Date.now() - ORDER_HOLD_MS;
    const readBeforeMs = performance.now() - ORDER_HOLD_MS;
    let n = 0;
    while (n < this.held.length && (this.held[n]!.at.tsMs <= upToMs || this.held[n]!.readMs <= readBeforeMs)) n++;
    const ready = this.held.splice(0, n).map((h) => h.event);
    if (ready.length) this.o.onEvents?.(ready);
    const next = this.held[0];
    if (next && !this.stopped) {
      const waitMs = Math.min(next.at.tsMs - upToMs, next.readMs - readBeforeMs);
      this.holdTimer = setTimeout(() => this.release(), Math.max(10, Math.ceil(waitMs)));
      this.holdTimer.unref();
    }
  }

  /** Whether the run is still active (status not terminal), with a watch on its directory while it is. */
  private refreshActive(runId: string, f: Followed, reconcile = false): void {
    let s: RunStatus | null = null;
    try { s = this.ctx.store.readStatus(runId); } catch { s = null; }
    // A run without a readable status is damaged (or half-removed): it is not followed, the poll finds it removed.
    // An ended run is followed a little longer, until its log says so: the runner logs the end after recording it.
    const endedMs = s?.endedAt ? Date.parse(s.endedAt) : NaN;
    f.active = s !== null && (!isTerminalRun(s.state) || (!f.sawEnd && Date.now() - endedMs < END_LINE_GRACE_MS));
    if (f.active) this.activeIds.add(runId); else this.activeIds.delete(runId);
    const dir = this.ctx.store.paths(runId).dir;
    if (f.active && !f.watcher) {
      const w = new DirWatch([dir], undefined, () => { this.dirty.add(runId); this.poke(); });
      if (w.watching) f.watcher = w; // else the poll reads it
    }
    if (f.active && !f.outWatcher) {
      const w = new DirWatch([this.ctx.store.paths(runId).outDir], undefined, () => { this.outputDirty.add(runId); this.pokeOutput(); });
      if (w.watching) f.outWatcher = w; // else no out/ yet: the runner makes it at its start, which the directory's watch sees
    }
    if (!f.active) {
      f.watcher?.close(); f.watcher = null;
      f.outWatcher?.close(); f.outWatcher = null;
    }
    if (reconcile && s && !isTerminalRun(s.state)) void reconcileRun(this.ctx, runId).catch(() => {});
  }

  /** The complete lines of the run's log after the follower's offset, which moves past them. */
  private readFrom(runId: string, f: Followed): HomeEvent[] {
    if (!isRunId(runId)) return [];
    const file = this.ctx.store.paths(runId).events;
    let buf: Buffer;
    try {
      // Never blocks on a FIFO in the log's place, nor reads through a symlinked run directory.
      const opened = openStateFile(file, `events.jsonl of ${runId}`);
      if (opened === null) return [];
      const { fd, size } = opened;
      try {
        if (size <= f.offset) return [];
        buf = Buffer.alloc(size - f.offset);
        const n = fs.readSync(fd, buf, 0, buf.length, f.offset);
        buf = buf.subarray(0, n);
      } finally {
        fs.closeSync(fd);
      }
    } catch {
      return [];
    }
    const end = buf.lastIndexOf(10);
    if (end < 0) return []; // a line being written: read it whole next time
    f.meta ??= readMeta(this.ctx, runId);
    const out: HomeEvent[] = [];
    let start = 0;
    while (start <= end) {
      const nl = buf.indexOf(10, start);
      const offset = f.offset + start;
      const line = buf.subarray(start, nl).toString('utf8');
      start = nl + 1;
      const e = parseLine(line);
      if (!e) continue; // unparsable lines are skipped, as every reader of the log does
      const tsMs = Date.parse(e.ts);
      if (END_TYPES.has(e.type)) f.sawEnd = true;
      out.push({
        cursor: formatCursor({ tsMs, runId, offset }),
        ts: e.ts, type: e.type, runId,
        sessionId: f.meta?.sessionId ?? '', rootRunId: f.meta?.rootRunId ?? runId, parentRunId: f.meta?.parentRunId ?? null,
        depth: f.meta?.depth ?? 0, fields: e.fields,
      });
    }
    f.offset += end + 1;
    return out;
  }
}

function parseLine(line: string): { ts: string; type: string; fields: Record<string, unknown> } | null {
  try {
    const v = JSON.parse(line) as unknown;
    if (!v || typeof v !== 'object' || Array.isArray(v)) return null;
    const { ts, type, ...fields } = v as Record<string, unknown>;
    // A time a cursor can carry (ms since the epoch, at most 15 digits): a line stamped before 1970 is damage.
    const tsMs = typeof ts === 'string' ? Date.parse(ts) : NaN;
    if (typeof type !== 'string' || !(tsMs >= 0 && tsMs < 1e15)) return null;
    return { ts: ts as string, type, fields };
  } catch {
    return null;
  }
}
