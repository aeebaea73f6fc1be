import fs from 'node:fs';
import path from 'node:path';
import lockfile from 'proper-lockfile';
import { SubagentError } from '../errors.js';
import { DirWatch } from '../wait.js';
import type { ProcessIdentity } from '../process/identity.js';
import { removeStaleTemps } from './atomic-write.js';
import { clearDeadHolder, lockDirOf, makeLockDir, removeLockDir, takeFreeLock } from './lock-dir.js';

export interface LockOptions {
  /** How long to wait for the lock before answering BUSY (docs/contract.md, "Run states": at most 5 s; default: the
   *  configured lock wait, 5 s unless set). */
  waitMs?: number;
  /** A holder that stops refreshing the lock for this long is presumed dead. */
  staleMs?: number;
  /** Name used in the BUSY message. */
  what?: string;
}

/**
 * The file system proper-lockfile works with: only the calls it makes. It copies its `fs` option at every lockSync
 * (`{ ...fs }`); a copy of Node's fs module (~100 properties) runs its lazy getters too, so the first lock of every
 * process loaded fs/promises and Node's file streams, and every lock paid for the copy.
 */
const LOCK_FS = {
  // The lock directory carries its holder's identity (store/lock-dir.ts), written before proper-lockfile probes and
  // records the directory's mtime; removing it removes the holder file first.
  mkdirSync: (dir: string) => makeLockDir(dir, holderConfig.self),
  realpathSync: fs.realpathSync, statSync: fs.statSync, utimesSync: fs.utimesSync,
  rmdirSync: (dir: string) => removeLockDir(dir),
} as unknown as typeof fs;

/**
 * How this process identifies itself in the locks it takes, and tells a dead holder from a live one. The store has
 * no process liveness of its own (docs/architecture.md, "The layers"): the server, the command line and the runner
 * configure it. Unconfigured, locks carry no holder and a dead holder's lock is freed by the stale time alone.
 */
const holderConfig: {
  self: ProcessIdentity | null;
  isAlive: ((id: ProcessIdentity) => boolean) | null;
  pidFree: ((dead: ProcessIdentity) => boolean) | null;
  waitMs: number;
} = { self: null, isAlive: null, pidFree: null, waitMs: 5000 };

export interface LockConfig {
  /** This process, recorded as the holder of every lock it takes. */
  self: ProcessIdentity;
  /** Whether a recorded holder still runs (pid, not a zombie, same start time). */
  isAlive: (id: ProcessIdentity) => boolean;
  /**
   * Whether a dead holder's pid is nobody else's now (no process, or still its zombie): only then are the temp files
   * named with that pid its own, to remove when its lock is cleared. Unset: they are left to the next server start.
   */
  pidFree?: (dead: ProcessIdentity) => boolean;
  /** Default wait for a held lock before BUSY. */
  waitMs?: number;
}

export function configureLocks(config: LockConfig): void {
  holderConfig.self = config.self;
  holderConfig.isAlive = config.isAlive;
  holderConfig.pidFree = config.pidFree ?? null;
  if (config.waitMs !== undefined) holderConfig.waitMs = config.waitMs;
}

/** Lock sections of this process not yet finished (acquiring, holding or releasing). */
const inFlight = new Set<Promise<unknown>>();
let closing = false;

/**
 * Call before `process.exit`: stops waiting for locks and lets every section under way finish and release, so that
 * no section is cut in half by the exit. (With the callback API an acquisition still in flight at exit left a lock
 * directory that nobody held, its mkdir completing on the thread pool after proper-lockfile's exit hook ran: every
 * other process then waited out the stale time and answered BUSY. Acquisition is synchronous now.)
 */
export async function settleLocks(): Promise<void> {
  closing = true;
  while (inFlight.size > 0) await Promise.allSettled([...inFlight]);
}

/** After `settleLocks`, for a process that goes on instead of exiting (a warm runner back in its pool). */
export function reopenLocks(): void {
  closing = false;
}

/**
 * Runs `fn` holding a cross-process lock on `target` (a `<target>.lock` directory, proper-lockfile semantics:
 * mkdir is atomic; the holder refreshes its mtime; a holder dead for `staleMs` is taken over). A holder recorded in the
 * lock that is provably dead is cleared at once (store/lock-dir.ts `clearDeadHolder`). The lock is never held
 * across a spawn or a wait: callers keep `fn` to bounded file work.
 */
export function withLock<T>(target: string, fn: () => T | Promise<T>, options: LockOptions = {}): Promise<T> {
  const section = lockSection(target, fn, options);
  inFlight.add(section);
  void section.catch(() => {}).finally(() => inFlight.delete(section));
  return section;
}

async function lockSection<T>(target: string, fn: () => T | Promise<T>, options: LockOptions): Promise<T> {
  const waitMs = options.waitMs ?? holderConfig.waitMs;
  const staleMs = options.staleMs ?? 5000;
  const deadline = performance.now() + waitMs;
  // A free lock is taken at once, without the library (its options copy, retry operation, mtime probe of utimes and
  // stat: ~40% of a section that is over in well under a millisecond); only a held one goes through it, for its
  // staleness check and take-over. Both make the same directory with the same holder entry.
  let release: (() => void) | null | undefined = holderConfig.self && !closing ? takeFreeLock(target, holderConfig.self, staleMs) : null;
  let delay = 2;
  let released: DirWatch | null = null;
  try {
    for (; !release;) {
      if (closing) throw new SubagentError('BUSY', 'this process is exiting; the lock was not taken.');
      try {
        // Synchronous (mkdir, stat; rmdir to release): taking and returning the lock never waits for this process's
        // event loop. The callback API held the lock from the mkdir on the thread pool until the loop got round to
        // its callback, and again until the rmdir's: under load (eight launches' sync writes queued on one loop) that
        // was most of every hold, and every process of the state home queued behind it.
        release = lockfile.lockSync(target, {
          fs: LOCK_FS,
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
        // A holder that provably died (SIGKILL inside its section) frees the lock at once, not after the stale time.
        if (holderConfig.isAlive && clearDeadHolder(lockDirOf(target), holderConfig.isAlive, (dead) => removeDeadHolderTemps(target, dead))) continue;
        if (performance.now() >= deadline) {
          throw new SubagentError('BUSY', `the ${options.what ?? 'state'} lock stayed held for ${waitMs} ms by another process; retry in a moment.`);
        }
        // Woken when the holder removes the lock (another process's release is a rmdir we can watch), the back-off
        // only a safety net: sleeping it out was most of a contended wait (8 concurrent launches: ~2 retries a section).
        released ??= watchRelease(target);
        await released.next(delay);
        delay = Math.min(delay * 2, 25);
      }
    }
  } finally {
    released?.close();
  }
  // Test seam (the reliability matrix): die holding this lock, as a SIGKILL inside a section would.
  if (process.env.SUBAGENTS_TEST_FAULT === `kill-in-lock:${path.basename(target)}`) process.kill(process.pid, 'SIGKILL');
  try {
    return await fn();
  } finally {
    try { release!(); } catch { /* taken over as stale meanwhile: not ours to remove */ }
  }
}

/**
 * A holder killed inside its section (SIGKILL, the OOM killer) may have left the temp file of an atomic write whose
 * rename never came, next to the locked file (`.ledger.json.<pid>.<hex>.tmp`). Its temps there go with its lock, by
 * its pid, and only while that pid is nobody else's: a live process that reused it may be writing one right now (it
 * cannot hold this lock, but it can write another file of that directory).
 */
function removeDeadHolderTemps(target: string, dead: ProcessIdentity): void {
  if (holderConfig.pidFree?.(dead)) removeStaleTemps(path.dirname(target), dead.pid, false);
}

/** Wakes a waiter at the next removal of the lock directory (its creation, or a take-over, is no reason to try). */
function watchRelease(target: string): DirWatch {
  const lockDir = lockDirOf(target);
  const lockName = path.basename(lockDir);
  return new DirWatch([path.dirname(target)], (name) => name === lockName && !fs.existsSync(lockDir));
}
