import fs from 'node:fs';
import path from 'node:path';

/**
 * The directory that holds a lock: `<target>.lock`, made by mkdir and removed by rmdir, as proper-lockfile makes it
 * (store/lock.ts). Both ways of taking a lock below agree on it, so they exclude each other.
 */
export function lockDirOf(target: string): string {
  return path.join(path.dirname(target), `${path.basename(target)}.lock`);
}

/**
 * Takes the lock on `target` only if it is free at once: returns its release, or null when it is held (or cannot be
 * made). No waiting, no staleness check and no library: for the runner's entry, which loads only Node built-ins and
 * leaves anything contended to `withLock` once its supervisor has loaded.
 */
export function tryLockSync(target: string): (() => void) | null {
  const dir = lockDirOf(target);
  try {
    fs.mkdirSync(dir);
  } catch {
    return null;
  }
  return () => { try { fs.rmdirSync(dir); } catch { /* taken over as stale meanwhile: not ours to remove */ } };
}
