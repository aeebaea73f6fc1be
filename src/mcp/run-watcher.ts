import fs from 'node:fs';
import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { ManagerContext } from '../manager/context.js';
import { listVisible } from '../manager/listing.js';
import { reconcileRun } from '../manager/reconcile.js';
import { isTerminalRun } from '../store/run-types.js';
import { runUri } from './resources.js';

const POLL_MS = 500;

/**
 * Follows the session's runs for notifications: `resources/updated` for subscribed runs on each state change,
 * `notifications/message` when a run ends, `list_changed` on new runs. Changes may come from runners and other
 * servers, so it watches the files (fast path) and polls every 500 ms (the guarantee: within 1 s).
 */
export class RunWatcher {
  private readonly subscribed = new Set<string>();
  private readonly lastState = new Map<string, string>();
  private readonly watchers = new Map<string, fs.FSWatcher>();
  private timer: NodeJS.Timeout | null = null;
  private pending = false;
  private primed = false;
  private knownRuns = new Set<string>();

  constructor(private readonly ctx: ManagerContext, private readonly server: Server) {}

  start(): void {
    this.timer = setInterval(() => this.poke(), POLL_MS);
    this.timer.unref();
    try {
      const w = fs.watch(this.ctx.layout.runsDir, () => this.poke());
      w.on('error', () => {});
      this.watchers.set('*', w);
    } catch { /* poll */ }
    this.poke();
  }

  stop(): void {
    if (this.timer) clearInterval(this.timer);
    for (const w of this.watchers.values()) w.close();
    this.watchers.clear();
  }

  subscribe(uri: string): void { this.subscribed.add(uri.split('?')[0]!); this.poke(); }
  unsubscribe(uri: string): void { this.subscribed.delete(uri.split('?')[0]!); }

  listChanged(): void {
    if (this.server.transport) void this.server.sendResourceListChanged().catch(() => {});
    this.poke();
  }

  /** Coalesces bursts of events into one scan. */
  poke(): void {
    if (this.pending) return;
    this.pending = true;
    setImmediate(() => { this.pending = false; void this.scan().catch(() => {}); });
  }

  private async scan(): Promise<void> {
    const metas = listVisible(this.ctx);
    for (const m of metas) {
      let state: string;
      let fp: string;
      try {
        const s = this.ctx.store.readStatus(m.runId);
        if (!s) continue;
        if (!isTerminalRun(s.state) && (this.lastState.get(m.runId)?.startsWith('running') || s.state === 'running')) {
          // A dead runner writes nothing: reconciliation is what turns silence into a state change.
          void reconcileRun(this.ctx, m.runId).catch(() => {});
        }
        state = s.state;
        fp = `${s.state}|${s.steps.map((x) => `${x.state}${x.members ? x.members.map((y) => y.state).join(',') : ''}`).join('/')}|${s.appendsTaken}`;
      } catch {
        continue;
      }
      const prev = this.lastState.get(m.runId);
      this.lastState.set(m.runId, fp);
      if (!isTerminalRun(state as never) && !this.watchers.has(m.runId)) {
        try {
          const w = fs.watch(this.ctx.store.paths(m.runId).dir, () => this.poke());
          w.on('error', () => {});
          this.watchers.set(m.runId, w);
        } catch { /* poll */ }
      }
      if (isTerminalRun(state as never) && this.watchers.has(m.runId)) {
        this.watchers.get(m.runId)!.close();
        this.watchers.delete(m.runId);
      }
      if (!this.primed || prev === fp) continue;
      if (!this.server.transport) continue;
      const uri = runUri(m.runId);
      if (this.subscribed.has(uri) || this.subscribed.has(`${uri}/output`)) {
        void this.server.sendResourceUpdated({ uri }).catch(() => {});
      }
      if ((prev === undefined || !isTerminalRun(prev.split('|')[0] as never)) && isTerminalRun(state as never)) {
        void this.server.sendLoggingMessage({ level: 'info', logger: 'subagents', data: `run ${m.runId} ${state}` }).catch(() => {});
      }
      if (prev === undefined && !this.knownRuns.has(m.runId)) {
        void this.server.sendResourceListChanged().catch(() => {});
      }
    }
    this.knownRuns = new Set(metas.map((m) => m.runId));
    this.primed = true;
  }
}
