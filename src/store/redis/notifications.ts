/**
 * Waiting on a run's channel (docs/scale-out.md, "Waiting"): one subscriber connection per process, any number of
 * waiters. A `status` with waitMs wakes on the PUBLISH of the status change, not on a poll.
 */
import { connect } from './connection.js';
import { channels } from './keys.js';
import type { ScriptedRedis } from './scripts.js';

export class RunNotifications {
  private sub: ScriptedRedis | null = null;
  private readonly waiters = new Map<string, Set<(message: string) => void>>();

  constructor(private readonly url: string) {}

  private subscriber(): ScriptedRedis {
    if (this.sub) return this.sub;
    // Subscribed connections may queue their SUBSCRIBE until connected; ioredis resubscribes after a reconnect.
    const sub = connect(this.url, { blocking: true, name: 'subagents-notify' });
    sub.on('message', (channel: string, message: string) => {
      for (const wake of this.waiters.get(channel) ?? []) wake(message);
    });
    this.sub = sub;
    return sub;
  }

  /**
   * Calls `onChange` at each status change of the run until the returned stop is called. Resolves once the
   * subscription is in place (or could not be made: then the caller's slow poll is all there is).
   */
  async watch(runId: string, onChange: () => void): Promise<() => void> {
    return this.listen(channels.run(runId), onChange);
  }

  /** Calls `onMessage` with each message on `channel` until the returned stop is called. */
  async listen(channel: string, onMessage: (message: string) => void): Promise<() => void> {
    const onChange = onMessage;
    let set = this.waiters.get(channel);
    const first = !set;
    if (!set) { set = new Set(); this.waiters.set(channel, set); }
    set.add(onChange);
    if (first) {
      await Promise.race([this.subscriber().subscribe(channel).catch(() => 0), new Promise((r) => setTimeout(r, 2000))]);
    }
    return () => {
      const s = this.waiters.get(channel);
      if (!s) return;
      s.delete(onChange);
      if (s.size === 0) {
        this.waiters.delete(channel);
        void this.sub?.unsubscribe(channel).catch(() => {});
      }
    };
  }

  close(): void {
    this.sub?.disconnect();
    this.sub = null;
  }
}
