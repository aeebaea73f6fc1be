import fs from 'node:fs';
import path from 'node:path';
import lockfile from 'proper-lockfile';
import { SubagentError } from '../errors.js';

export interface LockOptions {
  /** How long to wait for the lock before answering BUSY (SPEC §6: at most 5 s). */
  waitMs?: number;
  /** A holder that stops refreshing the lock for this long is presumed dead. */
  staleMs?: number;
  /** Name used in the BUSY message. */
  what?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Lock sections of this process not yet finished (acquiring, holding or releasing). */
const inFlight = new Set<Promise<unknown>>();
let closing = false;

/**
 * Call before `process.exit`: stops waiting for locks and lets every section under way finish and release. Exiting
 * with an acquisition in flight can leave a lock directory that nobody holds (its mkdir completes on the thread pool
 * while the process dies, after proper-lockfile's exit hook ran): every other process then waits out the stale
 * time and answers BUSY. Seen as 8 concurrent launches failing at bind after a runner exited mid-acquisition.
 */
export async function settleLocks(): Promise<void> {
  closing = true;
  while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
}

/**
 * Runs `fn` holding a cross-process lock on `target` (a `<target>.lock` directory, proper-lockfile semantics:
 * mkdir is atomic; the holder refreshes its mtime; a holder dead for `staleMs` is taken over). The lock is never held
 * across a spawn or a wait: callers keep `fn` to bounded file work.
 */
export function withLock<T>(target: string, fn: () => T | Promise<T>, options: LockOptions = {}): Promise<T> {
  const section = lockSection(target, fn, options);
  inFlight.add(section);
  void section.catch(() => {}).finally(() => inFlight.delete(section));
  return section;
}

async function lockSection<T>(target: string, fn: () => T | Promise<T>, options: LockOptions): Promise<T> {
  const waitMs = options.waitMs ?? 5000;
  const staleMs = options.staleMs ?? 5000;
  const deadline = performance.now() + waitMs;
  let release: (() => Promise<void>) | undefined;
  let delay = 2;
  for (;;) {
    if (closing) throw new SubagentError('BUSY', 'this process is exiting; the lock was not taken.');
    try {
      release = await lockfile.lock(target, {
        realpath: false,
        stale: staleMs,
        retries: 0,
        // A lost lock (its mtime was taken over) must not crash a server; the holder's work is bounded anyway.
        onCompromised: () => {},
      });
      break;
    } catch (e) {
      // ENOENT: the lock dir existed at mkdir and was released before proper-lockfile could stat it — a lost race with
      // its holder, not a failure (seen under heavy load as a launch failing at bind). Try again like ELOCKED.
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'ELOCKED' && !(code === 'ENOENT' && fs.existsSync(path.dirname(target)))) throw e;
      if (performance.now() >= deadline) {
        throw new SubagentError('BUSY', `the ${options.what ?? 'state'} lock stayed held for ${waitMs} ms by another process; retry in a moment.`);
      }
      await sleep(delay);
      delay = Math.min(delay * 2, 25);
    }
  }
  try {
    return await fn();
  } finally {
    await release().catch(() => {});
  }
}
