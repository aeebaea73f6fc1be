import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ProcessIdentity } from '../process/identity.js';

/**
 * The directory that holds a lock: `<target>.lock`, made by mkdir and removed by rmdir, as proper-lockfile makes it
 * (store/lock.ts). Both ways of taking a lock below agree on it, so they exclude each other.
 */
export function lockDirOf(target: string): string {
  return path.join(path.dirname(target), `${path.basename(target)}.lock`);
}

/**
 * Who holds a lock: one file inside the lock directory, `holder-<nonce>.json`, holding the holder's pid, start time and
 * host. Its name is unique to one acquisition, so removing it by name (unlink) succeeds for exactly one process and
 * only while that acquisition still stands: that is what lets another process clear a dead holder's lock safely.
 */
const HOLDER_PREFIX = 'holder-';

/** Makes each holder file's name unique within this process (pid and time make it unique across processes). */
let acquisitions = 0;

interface HolderRecord extends ProcessIdentity {
  host: string;
}

/** Makes the lock directory with its holder file in it (mkdir first: the mkdir is the lock). Throws EEXIST when held. */
export function makeLockDir(dir: string, holder: ProcessIdentity | null): void {
  fs.mkdirSync(dir);
  if (!holder) return; // unknown identity: only the stale time frees this lock if its holder dies
  try {
    const record: HolderRecord = { pid: holder.pid, startTime: holder.startTime, host: os.hostname() };
    fs.writeFileSync(path.join(dir, `${HOLDER_PREFIX}${process.pid}-${Date.now().toString(36)}-${++acquisitions}.json`), JSON.stringify(record), { flag: 'wx' });
  } catch {
    // A lock nobody can identify still excludes; its stale time is the backstop.
  }
}

/** Removes a lock directory: its holder file, then the directory (rmdir: never removes anything else put there). */
export function removeLockDir(dir: string): void {
  let names: string[] = [];
  try { names = fs.readdirSync(dir); } catch { /* gone, or not ours to read: rmdir says which */ }
  for (const name of names) {
    if (name.startsWith(HOLDER_PREFIX)) try { fs.unlinkSync(path.join(dir, name)); } catch { /* removed meanwhile */ }
  }
  fs.rmdirSync(dir);
}

/**
 * Clears the lock in `dir` if its holder provably died: the holder file names a process on this host that `isAlive`
 * says is gone (pid missing, a zombie, or another start time). Returns whether it cleared it. Safe against races:
 * only one clearer's unlink of that acquisition's holder file succeeds, and a lock taken again since has another
 * holder file (its directory must have been removed first, which removes the old holder file). A lock without a
 * holder file (its holder died between mkdir and writing it, or another host's) is left to the stale time.
 */
export function clearDeadHolder(dir: string, isAlive: (id: ProcessIdentity) => boolean): boolean {
  let names: string[];
  try {
    names = fs.readdirSync(dir).filter((n) => n.startsWith(HOLDER_PREFIX));
  } catch {
    return false;
  }
  if (names.length !== 1) return false;
  const file = path.join(dir, names[0]!);
  let holder: HolderRecord;
  try {
    holder = JSON.parse(fs.readFileSync(file, 'utf8')) as HolderRecord;
  } catch {
    return false;
  }
  if (holder.host !== os.hostname() || !Number.isInteger(holder.pid) || typeof holder.startTime !== 'string') return false;
  if (holder.startTime === 'unknown' || isAlive({ pid: holder.pid, startTime: holder.startTime })) return false;
  try {
    fs.unlinkSync(file); // the claim: one clearer wins
  } catch {
    return false;
  }
  // The directory is still the dead holder's acquisition (nobody can mkdir while it exists): remove it.
  try { fs.rmdirSync(dir); } catch { /* taken over as stale meanwhile */ }
  return true;
}

/**
 * Takes the lock on `target` only if it is free at once: returns its release, or null when it is held (or cannot be
 * made). No waiting, no staleness check and no library: for the runner's entry, which loads only Node built-ins and
 * leaves anything contended to `withLock` once its supervisor has loaded. `holder` is recorded in the lock.
 */
export function tryLockSync(target: string, holder: ProcessIdentity | null = null): (() => void) | null {
  const dir = lockDirOf(target);
  try {
    makeLockDir(dir, holder);
  } catch {
    return null;
  }
  return () => { try { removeLockDir(dir); } catch { /* taken over as stale meanwhile: not ours to remove */ } };
}
