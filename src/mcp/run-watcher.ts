import fs from 'node:fs';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { ManagerContext } from '../manager/context.js';
import { listVisible, listVisibleRuns, type RunMeta, type VisibleRun } from '../manager/listing.js';
import { reconcileRun } from '../manager/reconcile.js';
import { markAdoptedRuns } from '../manager/sessions.js';
import { watchRunDirs } from '../manager/run-files.js';
import { peekStatus } from '../manager/run-peek.js';
import { CoalescedRun, DirWatch } from '../wait.js';
import { isTerminalRun, type RunState } from '../store/run-types.js';
import { runUri } from './resources.js';

/** The backing poll: with the 500 ms period a state change is notified within 1 s even when no file event arrives. */
export const POLL_MS = 500;
/**
 * Every this many polls (5 s) the poll audits the whole session: every run's directory and dismissal checked again.
 * New runs appear through `runs/`, whose own watch brings a full scan at once, and that scan takes ended runs as the
 * last audit found them; the audit is what sees an ended run removed or dismissed by another process. Listing every
 * run on every poll cost an idle server two file checks per run of its session twice a second (1 000 runs: +24 ms of
 * CPU a second, doing nothing).
 */
export const FULL_POLL_EVERY = 10;
/**
 * Full scans (listing every run of the session) at most this often: a launch makes several events in `runs/` and
 * announces itself too, and a burst of eight launches made a dozen full scans while its runners were booting.
 */
export const FULL_SCAN_GAP_MS = 100;

interface Seen {
  fp: string;
  state: RunState;
  /** The status file's identity when it was read (inode, size, times), and what of it the fingerprint took. */
  statusKey?: string | null;
  statusFp?: string;
}

/** An ended run as a full scan last checked it. */
interface Settled { meta: RunMeta; dismissed: boolean }

/**
 * Follows the session's runs for notifications: `resources/updated` for subscribed runs on each state change,
 * `notifications/message` when a top-level run ends, `list_changed` when the listed runs change (launch, restore, dismiss, from any process). Changes come from runners and
 * other servers too, so it watches the files (fast path) and polls every 500 ms (the guarantee: within 1 s).
 */
export class RunWatcher {
  /** Subscribed URIs without their query, e.g. `subagents://runs/r-…/output`. */
  private readonly subscribed = new Set<string>();
  private readonly seen = new Map<string, Seen>();
  private readonly watchers = new Map<string, DirWatch>();
  private timer: NodeJS.Timeout | null = null;
  /** One scan at a time, bursts of pokes coalesced (src/wait.ts); the want* flags say what the next scan covers. */
  private readonly scans = new CoalescedRun(() => this.scan());
  /** The next scan lists every run (not only the active ones), and so does the one after a poke while scanning. */
  private wantFull = true;
  /** The runs not yet terminal at the last look: all that a light scan reads. */
  private readonly active = new Map<string, RunMeta>();
  /** Active runs with a file event since their last read: what a scan re-reads when it is not told to read all. */
  private readonly dirty = new Set<string>();
  /** The next scan re-reads every active run (a tool call, the poll), not only the dirty ones. */
  private readAll = true;
  /** The next scan also reconciles the running runs it reads (the poll: silence is what a dead runner leaves). */
  private reconcileNext = true;
  private primed = false;
  private lastFullAtMs = -Infinity;
  private fullTimer: NodeJS.Timeout | null = null;
  private readonly startedAt = new Date().toISOString();
  private knownSessions = new Set<string>();
  /** The runs resources/list shows (visible, not dismissed), to announce list changes from any source. */
  private listed = '';
  /**
   * Ended runs as a full scan last checked them (present, dismissed or not). Later full scans take them as they are
   * and look only at new and active runs: a launch's full scan then costs the same with 1 000 ended runs in the
   * session as with none (it checked two files per run). The audit looks at every run again (`listVisibleRuns`: one
   * stat per run whose directory is unchanged).
   */
  private settled = new Map<string, Settled>();
  /** The next full scan checks every run again (the 5 s poll; runs already listed changed: dismiss, restore). */
  private auditNext = true;

  constructor(private readonly ctx: ManagerContext, private readonly server: Server) {}

  start(): void {
    let polls = 0;
    this.timer = setInterval(() => {
      this.reconcileNext = true;
      this.poke({ audit: ++polls % FULL_POLL_EVERY === 0, all: true });
    }, POLL_MS);
    this.timer.unref();
    // A hidden name in runs/ is a run directory being built (its rename into place is the event that counts) or
    // being removed: a full scan for it listed the session while the launch that made it held the ledger lock.
    this.watchers.set('*', new DirWatch([this.ctx.layout.runsDir], (name) => !name.startsWith('.'), () => this.poke({ full: true })));
    this.poke({ full: true, all: true });
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    if (this.fullTimer) clearTimeout(this.fullTimer);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  subscribe(uri: string): void { this.subscribed.add(uri.split('?')[0]!); this.poke({ all: true }); }
  unsubscribe(uri: string): void { this.subscribed.delete(uri.split('?')[0]!); }

  /**
   * A launch changed the list, or (`existing`) a restore or a dismissal changed runs already listed: the next scan
   * announces the change (once, deduplicated).
   */
  listChanged(existing = false): void { this.poke(existing ? { audit: true } : { full: true }); }

  /**
   * Coalesces bursts of events into one scan; a poke during a scan runs one more scan after it. A light poke (a tool
   * call, an event in an active run's directory) reads only the active runs: listing every run of the session on each
   * was most of the server's CPU under load (eight concurrent launches in a session with a hundred finished runs). New
   * runs, dismissals and removals are the full scan's: on the runs directory's events, on `listChanged` and on the poll.
   * An event in one run's directory marks only that run to be read again, and only the poll reconciles: with eight
   * launches in flight every event made the scan read, and reconcile, all eight (a quarter of the server's CPU).
   */
  poke(o: { full?: boolean; audit?: boolean; all?: boolean; runId?: string } = { all: true }): void {
    if (o.full || o.audit) this.wantFull = true;
    if (o.audit) this.auditNext = true;
    if (o.all) this.readAll = true;
    if (o.runId !== undefined) this.dirty.add(o.runId);
    this.scans.request();
  }

  private send(fn: () => Promise<void>): void {
    if (!this.server.transport) return; // not connected (yet, or any more)
    try { void fn().catch(() => {}); } catch { /* closed meanwhile */ }
  }

  private async scan(): Promise<void> {
    const nowMs = performance.now();
    let full = this.wantFull || !this.primed;
    if (full && this.primed && nowMs - this.lastFullAtMs < FULL_SCAN_GAP_MS) {
      full = false; // too soon after the last one: it stays wanted, and a timer brings it at the end of the gap
      this.fullTimer ??= setTimeout(() => { this.fullTimer = null; this.poke({}); }, FULL_SCAN_GAP_MS - (nowMs - this.lastFullAtMs));
      this.fullTimer.unref();
    } else if (full) {
      this.wantFull = false;
      this.lastFullAtMs = nowMs;
    }
    const audit = full && (this.auditNext || !this.primed);
    if (audit) this.auditNext = false;
    const all = this.readAll || !this.primed;
    const reconcile = this.reconcileNext;
    const dirty = new Set(this.dirty);
    this.readAll = false;
    this.reconcileNext = false;
    this.dirty.clear();
    // An audit looks at every run again; another full scan takes the ended runs as the last one found them.
    const audited: VisibleRun[] | null = full && audit ? listVisibleRuns(this.ctx) : null;
    const metas = audited ? audited.map((r) => r.meta) : full ? listVisible(this.ctx, this.settled) : all ? [...this.active.values()] : [...dirty].flatMap((id) => this.active.get(id) ?? []);
    const sessions = full ? this.ctx.visibleSessions() : this.knownSessions;
    if (full) markAdoptedRuns(this.ctx, metas);
    for (const m of metas) {
      const prev = this.seen.get(m.runId);
      if (prev && isTerminalRun(prev.state)) continue; // terminal is final: nothing more to notify
      if (prev && !all && !dirty.has(m.runId)) continue; // no event since its last read (the poll reads it anyway)
      const cur = this.read(m, prev, reconcile);
      if (!cur) continue;
      this.seen.set(m.runId, cur);
      if (isTerminalRun(cur.state)) this.active.delete(m.runId); else this.active.set(m.runId, m);
      this.follow(m.runId, cur.state);
      if (!this.primed || prev?.fp === cur.fp) continue;
      const base = runUri(m.runId);
      for (const uri of this.subscribed) {
        if (uri === base || uri.startsWith(`${base}/`)) this.send(() => this.server.sendResourceUpdated({ uri }));
      }
      if (isTerminalRun(cur.state) && m.depth === 0 && this.endedWhileWatched(m, prev)) {
        this.send(() => this.server.sendLoggingMessage({ level: 'info', logger: 'subagents', data: `run ${m.runId} ${cur.state}` }));
      }
    }
    if (!full) return;
    const present = new Set(metas.map((m) => m.runId));
    for (const runId of this.active.keys()) if (!present.has(runId)) this.active.delete(runId); // removed (gc)
    const settled = audited ? new Map<string, Settled>() : this.settled;
    const listedIds: string[] = [];
    for (const [i, m] of metas.entries()) {
      const known = audited ? undefined : this.settled.get(m.runId);
      const dismissed = audited ? audited[i]!.dismissed : known ? known.dismissed : this.ctx.store.isDismissed(m.runId);
      if (!dismissed) listedIds.push(m.runId);
      const state = this.seen.get(m.runId)?.state;
      if (!known && state !== undefined && isTerminalRun(state)) settled.set(m.runId, { meta: m, dismissed });
    }
    this.settled = settled;
    const listed = listedIds.sort().join(',');
    if (this.primed && listed !== this.listed) this.send(() => this.server.sendResourceListChanged());
    this.listed = listed;
    this.knownSessions = new Set(sessions);
    this.primed = true;
  }

  /**
   * A run first seen already terminal ended while this session watched only if it is new (created since this server
   * started) and its session was already visible; a run that merely became visible through restore ended earlier and
   * is not announced again.
   */
  private endedWhileWatched(m: RunMeta, prev: Seen | undefined): boolean {
    if (prev) return true;
    if (m.createdAt < this.startedAt) return false;
    return m.sessionId === this.ctx.sessionId || this.knownSessions.has(m.sessionId) || m.depth > 0;
  }

  private read(m: RunMeta, prev: Seen | undefined, reconcile: boolean): Seen | null {
    try {
      // An unchanged status file is not read and checked again (`peekStatus`): with eight runs going, every tool call
      // and every event re-read all of them (most of a burst's server CPU after the launches).
      const { key: statusKey, status: s } = peekStatus(this.ctx, m.runId);
      if (!s) return null;
      let state: RunState;
      let statusFp: string;
      if (statusKey !== null && prev?.statusKey === statusKey && prev.statusFp !== undefined) {
        state = prev.state;
        statusFp = prev.statusFp;
      } else {
        const steps = s.steps.map((x) => `${x.state}${x.members ? `[${x.members.map((y) => y.state).join(',')}]` : ''}`).join('/');
        state = s.state;
        statusFp = `${s.state}|${steps}|${s.appendsTaken}`;
      }
      if (reconcile && !isTerminalRun(state) && (prev?.state === 'running' || state === 'running')) {
        // A dead runner writes nothing: reconciliation is what turns silence into a state change.
        void reconcileRun(this.ctx, m.runId).catch(() => {});
      }
      let appends = 0;
      // Only chains take appended steps (docs/contract.md, "Tools"): other runs have no appends directory to list.
      if (m.mode === 'chain') try { appends = fs.readdirSync(this.ctx.store.paths(m.runId).appendsDir).length; } catch { /* none */ }
      return { state, fp: `${statusFp}|${appends}`, statusKey, statusFp };
    } catch {
      return null;
    }
  }

  /** Watches an active run's directory (fast path); stops when it ends. */
  private follow(runId: string, state: RunState): void {
    const w = this.watchers.get(runId);
    if (!isTerminalRun(state) && !w) {
      this.watchers.set(runId, watchRunDirs([this.ctx.store.paths(runId).dir], () => this.poke({ runId })));
    } else if (isTerminalRun(state) && w) {
      w.close();
      this.watchers.delete(runId);
    }
  }
}
