import fs from 'node:fs';

/**
 * Waiting on the state home: `fs.watch` on directories wakes a waiter at once, and a poll stands behind it (some file
 * systems deliver no events, and a dead process writes nothing). Every wait in the server, the runner and the command
 * line is one of the two below. Built-ins only: the runner's entry uses it before it reports ready.
 */

/** Which names of a watched directory wake a waiter (an event that carries no name always does). */
export type NameFilter = (name: string) => boolean;

/**
 * A watch on directories that remembers a change seen between two waits. `next(maxMs)` resolves true at the next
 * change (at once if one came since the last call), false after `maxMs` or when `signal` aborts.
 */
export class DirWatch {
  private readonly watchers: fs.FSWatcher[] = [];
  private missed = false;
  private wake: ((changed: boolean) => void) | null = null;

  constructor(dirs: readonly string[], filter: NameFilter = () => true, onChange?: () => void) {
    for (const dir of dirs) {
      try {
        const w = fs.watch(dir, (_event, name) => {
          if (name !== null && !filter(name)) return;
          onChange?.();
          if (this.wake) this.wake(true); else this.missed = true;
        });
        w.on('error', () => {});
        this.watchers.push(w);
      } catch { /* the caller's poll covers it */ }
    }
  }

  /** Whether any directory is watched (a directory that does not exist yet is not: watch again later, or poll). */
  get watching(): boolean {
    return this.watchers.length > 0;
  }

  next(maxMs: number, signal?: AbortSignal): Promise<boolean> {
    if (this.missed) { this.missed = false; return Promise.resolve(true); }
    if (signal?.aborted) return Promise.resolve(false);
    return new Promise((resolve) => {
      const done = (changed: boolean) => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', onAbort);
        this.wake = null;
        this.missed = false;
        resolve(changed);
      };
      const onAbort = () => done(false);
      const timer = setTimeout(() => done(false), Math.max(0, maxMs));
      signal?.addEventListener('abort', onAbort, { once: true });
      this.wake = done;
    });
  }

  close(): void {
    for (const w of this.watchers) w.close();
    this.watchers.length = 0;
    this.wake?.(false);
  }
}

export interface WaitUntil<T> {
  /** Directories whose changes are worth a look. */
  dirs: readonly string[];
  filter?: NameFilter;
  /** The value the wait is for, or null to keep waiting; a check that throws counts as null. */
  check: () => T | null;
  /** The poll behind the watch. */
  pollMs: number;
  timeoutMs: number;
  signal?: AbortSignal;
}

/**
 * Waits until `check()` gives a value (resolved with it), or the time is up or `signal` aborts (null). The watch is set
 * up before the first check, so a change between the check and the watch is not left to the poll.
 */
export async function waitUntil<T>(o: WaitUntil<T>): Promise<T | null> {
  const deadline = performance.now() + o.timeoutMs;
  const watch = new DirWatch(o.dirs, o.filter);
  const look = (): T | null => { try { return o.check(); } catch { return null; } };
  try {
    for (;;) {
      const v = look();
      if (v !== null) return v;
      const left = deadline - performance.now();
      if (left <= 0 || o.signal?.aborted) return null;
      await watch.next(Math.min(o.pollMs, left), o.signal);
    }
  } finally {
    watch.close();
  }
}

/**
 * Runs `work` on the next turn of the event loop after a request, never two at once: requests that come before it
 * starts join it, and requests while it runs make exactly one more run after it. A burst of file events thus costs one
 * scan, and no event is left unscanned. What a run must cover is the caller's own state (flags it sets before asking).
 */
export class CoalescedRun {
  private pending = false;
  private running = false;
  private again = false;

  constructor(private readonly work: () => void | Promise<void>) {}

  request(): void {
    if (this.running) { this.again = true; return; }
    if (this.pending) return;
    this.pending = true;
    setImmediate(() => {
      this.pending = false;
      this.running = true;
      void (async () => { await this.work(); })().catch(() => { /* the next request tries again */ }).finally(() => {
        this.running = false;
        if (this.again) { this.again = false; this.request(); }
      });
    });
  }
}
