/**
 * The feed of every run's events (docs/watch-and-ui.md, "`watch` over Redis"): a Redis stream written by the same scripts
 * that record the events (./scripts.ts), read with XREAD BLOCK on a connection of its own. An entry's stream id is
 * its cursor: a reader that resumes from it gets every later entry once.
 */
import { connect, redisReason } from './connection.js';
import { keys } from './keys.js';

export interface FeedEntry {
  /** The stream id (`<ms>-<seq>`): the cursor to resume after this entry. */
  id: string;
  runId: string;
  sessionId: string;
  event: Record<string, unknown>;
}

/** A cursor as a stream id; `start` is before the first entry. */
export const FEED_START = '0-0';
export const isFeedId = (s: string): boolean => /^\d{1,15}-\d{1,20}$/.test(s);

/** The id just before the first entry recorded at `ms` or later (XREAD returns entries after the id it is given). */
export const feedIdBefore = (ms: number): string => (ms <= 0 ? FEED_START : `${ms - 1}-18446744073709551615`);

type RawEntry = [id: string, fields: string[]];

function parse([id, fields]: RawEntry): FeedEntry | null {
  const f = new Map<string, string>();
  for (let i = 0; i + 1 < fields.length; i += 2) f.set(fields[i]!, fields[i + 1]!);
  let event: unknown;
  try { event = JSON.parse(f.get('event') ?? ''); } catch { return null; }
  if (typeof event !== 'object' || event === null || Array.isArray(event)) return null;
  return { id, runId: f.get('run') ?? '', sessionId: f.get('session') ?? '', event: event as Record<string, unknown> };
}

/**
 * Follows the feed from after `from` (a stream id; null: from now on) until `signal` aborts, handing each batch to
 * `onEntries` in order; `onPlaced` is called once the place to read from is known (every event recorded after
 * that is handed over). Redis away: the read is retried once the connection is back (ioredis reconnects by itself);
 * nothing is skipped, since the next read starts after the last entry handed over. `onAway` hears why when reads start
 * failing, and null when they work again.
 */
export async function followFeed(url: string, from: string | null, signal: AbortSignal, onEntries: (entries: FeedEntry[]) => void | Promise<void>, onPlaced?: () => void, onAway?: (reason: string | null) => void): Promise<void> {
  const conn = connect(url, { blocking: true, name: 'subagents-feed' });
  const stop = () => conn.disconnect();
  signal.addEventListener('abort', stop, { once: true });
  let away = false;
  // This connection queues its reads while Redis is away (it waits, it does not fail): its own events say so.
  const wentAway = (e: unknown) => { if (!away && !signal.aborted) { away = true; onAway?.(redisReason(e)); } };
  const cameBack = () => { if (away) { away = false; onAway?.(null); } };
  conn.on('error', wentAway);
  conn.on('ready', cameBack);
  try {
    let last = from;
    while (!signal.aborted) {
      try {
        if (last === null) {
          const newest = await untilAborted(conn.xrevrange(keys.feed, '+', '-', 'COUNT', 1), signal);
          last = newest[0]?.[0] ?? FEED_START;
        }
        onPlaced?.();
        const got = await untilAborted(conn.xread('COUNT', 500, 'BLOCK', 5000, 'STREAMS', keys.feed, last), signal) as Array<[string, RawEntry[]]> | null;
        const raw = got?.[0]?.[1] ?? [];
        if (raw.length === 0) continue;
        last = raw[raw.length - 1]![0];
        const entries = raw.map(parse).filter((e): e is FeedEntry => e !== null);
        if (entries.length) await onEntries(entries);
      } catch (e) {
        if (signal.aborted) break;
        wentAway(e);
        await new Promise((r) => setTimeout(r, 1000));
      }
    }
  } finally {
    signal.removeEventListener('abort', stop);
    conn.disconnect();
  }
}

/**
 * A command's answer, or a rejection once `signal` aborts. A command queued while the client waits to reconnect (Redis
 * away) is not failed by disconnect() in that state: awaiting it alone kept `watch --redis` alive past Ctrl-C.
 */
function untilAborted<T>(command: Promise<T>, signal: AbortSignal): Promise<T> {
  if (signal.aborted) return Promise.reject(new Error('aborted'));
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(new Error('aborted'));
    signal.addEventListener('abort', onAbort, { once: true });
    command.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
}
