import type { Server } from '@modelcontextprotocol/sdk/server/index.js';
import type { ManagerContext } from '../manager/context.js';
import type { FeedEntry } from '../store/redis/feed.js';

/** How long a tool call waits at most for the feed's first read (Redis away: it answers BUSY anyway). */
const PLACE_WAIT_MS = 2000;

/** Feed events that change a session's resource list (a run appears, is dismissed or removed). */
const LIST_EVENTS = new Set(['accepted', 'queued', 'dismissed', 'removed']);

/**
 * Distributed mode's notifications (docs/scale-out.md, "What works over Redis"), the same as ./run-watcher.ts sends
 * in local mode: `notifications/resources/list_changed` when a run of the session (or of a session it restored)
 * appears, is dismissed or removed, from whichever server or command did it, and a `notifications/message` when one
 * ends. Both come from the Redis feed of every run's events, read from now on with a blocking read (no poll).
 */
export class FeedNotifier {
  private readonly stopping = new AbortController();
  private sessions: Set<string>;

  constructor(private readonly ctx: ManagerContext, private readonly server: Server) {
    this.sessions = new Set([ctx.sessionId]);
  }

  /**
   * Resolves once the feed is read from a known place (or after a bound, Redis being away): tool calls wait for it,
   * so the events of a first launch are never before the place the reading starts from.
   */
  ready: Promise<void> = Promise.resolve();

  start(): void {
    const d = this.ctx.distributed!;
    let placed: () => void = () => {};
    const bound = new Promise<void>((r) => { const t = setTimeout(r, PLACE_WAIT_MS); t.unref(); });
    this.ready = Promise.race([new Promise<void>((r) => { placed = r; }), bound]);
    void this.refresh();
    void d.follow(null, this.stopping.signal, (entries) => this.onEntries(entries), () => placed())
      .catch((e: Error) => { placed(); this.ctx.log(`the feed of run events stopped: ${e.message}`); });
  }

  stop(): void { this.stopping.abort(); }

  /**
   * The lineage changed (restore): the sessions whose runs are listed are read again, and the list announced as
   * changed when it grew, as local mode announces the adopted runs.
   */
  async lineageChanged(): Promise<void> {
    const before = this.sessions.size;
    await this.refresh();
    if (this.sessions.size !== before) this.send(() => this.server.sendResourceListChanged());
  }

  private async refresh(): Promise<void> {
    try { this.sessions = await this.ctx.distributed!.lineage(this.ctx); } catch { /* Redis away: the last known lineage stands */ }
  }

  private onEntries(entries: FeedEntry[]): void {
    let listChanged = false;
    for (const e of entries) {
      if (!this.sessions.has(e.sessionId)) continue;
      const type = String(e.event.type);
      if (LIST_EVENTS.has(type)) listChanged = true;
      if (type === 'ended') this.send(() => this.server.sendLoggingMessage({ level: 'info', logger: 'subagents', data: `run ${e.runId} ${String(e.event.state)}` }));
    }
    if (listChanged) this.send(() => this.server.sendResourceListChanged());
  }

  private send(fn: () => Promise<void>): void {
    if (!this.server.transport) return; // not connected (yet, or any more)
    try { void fn().catch(() => {}); } catch { /* closed meanwhile */ }
  }
}
