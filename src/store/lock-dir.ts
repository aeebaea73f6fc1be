import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import type { ProcessIdentity } from '../process/identity.js';
import { pinForFree, unpinLater } from './deferred-free.js';

/**
 * The directory that holds a lock: `<target>.lock`, made by mkdir and removed by rmdir, as proper-lockfile makes it
 * (store/lock.ts). Both ways of taking a lock below agree on it, so they exclude each other.
 */
export function lockDirOf(target: string): string {
  return path.join(path.dirname(target), `${path.basename(target)}.lock`);
}

/**
 * Who holds a lock: one entry inside the lock directory, `holder-<nonce>`, a symlink whose target is the holder's pid,
 * start time and host as JSON (never followed: read with readlink). Its name is unique to one acquisition, so removing
 * it by name (unlink) succeeds for exactly one process and only while that acquisition still stands: that is what lets
 * another process clear a dead holder's lock safely. A symlink is one system call and no data block: a regular file
 * (open, write, close) was a third of the cost of every lock, and every run takes several. Holder files that are
 * regular JSON files (written by earlier versions) are read too.
 */
const HOLDER_PREFIX = 'holder-';

/** Makes each holder file's name unique within this process (pid and time make it unique across processes). */
let acquisitions = 0;

/** The holder entry this process made in each lock directory it holds: its release unlinks it without a listing. */
const ownHolders = new Map<string, string>();

interface HolderRecord extends ProcessIdentity {
  host: string;
}

/** Makes the lock directory with its holder entry in it (mkdir first: the mkdir is the lock). Throws EEXIST when held. */
export function makeLockDir(dir: string, holder: ProcessIdentity | null): void {
  fs.mkdirSync(dir);
  if (!holder) return; // unknown identity: only the stale time frees this lock if its holder dies
  try {
    const record: HolderRecord = { pid: holder.pid, startTime: holder.startTime, host: os.hostname() };
    const name = `${HOLDER_PREFIX}${process.pid}-${Date.now().toString(36)}-${++acquisitions}`;
    fs.symlinkSync(JSON.stringify(record), path.join(dir, name));
    ownHolders.set(dir, name);
  } catch {
    // A lock nobody can identify still excludes; its stale time is the backstop.
  }
}

/**
 * Removes a lock directory: its holder entry, then the directory (rmdir: never removes anything else put there). The
 * release of this process's own acquisition unlinks the entry it made by name; anything else (a stale lock taken
 * over, an entry that is not there any more) lists the directory first.
 */
export function removeLockDir(dir: string): void {
  // The directory's block is freed when its last reference goes: on the thread pool (store/deferred-free.ts), not in
  // the rmdir that releases the lock.
  const pinned = pinForFree(dir);
  try {
    const own = ownHolders.get(dir);
    ownHolders.delete(dir);
    if (own !== undefined) {
      try {
        fs.unlinkSync(path.join(dir, own));
      } catch (e) {
        // Our entry is gone: the lock was taken over as stale (its directory removed with the entry) and may be
        // another holder's now. Not ours to remove.
        if ((e as NodeJS.ErrnoException).code === 'ENOENT') return;
      }
      try {
        fs.rmdirSync(dir);
        return;
      } catch { /* not as this process left it: the general way below */ }
    }
    let names: string[] = [];
    try { names = fs.readdirSync(dir); } catch { /* gone, or not ours to read: rmdir says which */ }
    for (const name of names) {
      if (name.startsWith(HOLDER_PREFIX)) try { fs.unlinkSync(path.join(dir, name)); } catch { /* removed meanwhile */ }
    }
    fs.rmdirSync(dir);
  } finally {
    unpinLater(pinned);
  }
}

/** A holder entry's record: a symlink's target, or (earlier versions) a regular file's content; null when unreadable. */
export function readHolder(file: string): HolderRecord | null {
  let text: string;
  try {
    text = fs.readlinkSync(file);
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EINVAL') return null; // gone
    try { text = fs.readFileSync(file, 'utf8'); } catch { return null; }
  }
  try {
    return JSON.parse(text) as HolderRecord;
  } catch {
    return null;
  }
}

/**
 * Clears the lock in `dir` if its holder provably died: the holder file names a process on this host that `isAlive`
 * says is gone (pid missing, a zombie, or another start time). Returns whether it cleared it. Safe against races:
 * only one clearer's unlink of that acquisition's holder file succeeds, and a lock taken again since has another
 * holder file (its directory must have been removed first, which removes the old holder file). A lock without a
 * holder file (its holder died between mkdir and writing it, or another host's) is left to the stale time.
 * `leftovers` runs for the one clearer that won, while the directory still stands (nobody can take the lock yet): the
 * place to remove what the dead holder left half written in its section.
 */
export function clearDeadHolder(dir: string, isAlive: (id: ProcessIdentity) => boolean, leftovers?: (dead: ProcessIdentity) => void): boolean {
  let names: string[];
  try {
    names = fs.readdirSync(dir).filter((n) => n.startsWith(HOLDER_PREFIX));
  } catch {
    return false;
  }
  if (names.length !== 1) return false;
  const file = path.join(dir, names[0]!);
  const holder = readHolder(file);
  if (holder === null || typeof holder !== 'object') return false;
  if (holder.host !== os.hostname() || !Number.isInteger(holder.pid) || typeof holder.startTime !== 'string') return false;
  if (holder.startTime === 'unknown' || isAlive({ pid: holder.pid, startTime: holder.startTime })) return false;
  try {
    fs.unlinkSync(file); // the claim: one clearer wins
  } catch {
    return false;
  }
  try { leftovers?.({ pid: holder.pid, startTime: holder.startTime }); } catch { /* the lock is cleared all the same */ }
  // The directory is still the dead holder's acquisition (nobody can mkdir while it exists): remove it.
  try { fs.rmdirSync(dir); } catch { /* taken over as stale meanwhile */ }
  return true;
}

/**
 * Takes the lock on `target` if it is free at once, as `withLock` does through proper-lockfile, for a section of any
 * length: the same directory and holder entry, its mtime refreshed every `staleMs / 2` while it is held (what
 * proper-lockfile does, so that nobody takes it over as stale), and only while it is still this acquisition's (its
 * holder entry is there). Returns its release, or null when it is held or could not be made (the caller then goes
 * through proper-lockfile, which says why). The release removes the directory only while this acquisition's holder
 * entry is there: a lock taken over meanwhile is the new holder's.
 */
export function takeFreeLock(target: string, holder: ProcessIdentity, staleMs: number): (() => void) | null {
  const dir = lockDirOf(target);
  try {
    makeLockDir(dir, holder);
  } catch {
    return null;
  }
  const own = ownHolders.get(dir);
  const entry = own === undefined ? null : path.join(dir, own);
  let refresh: NodeJS.Timeout | null = null;
  const keepFresh = () => {
    refresh = setTimeout(() => {
      try {
        if (entry !== null) fs.lstatSync(entry); // still this acquisition's
        const now = new Date();
        fs.utimesSync(dir, now, now);
        keepFresh();
      } catch { /* taken over, or gone: nothing of ours to refresh */ }
    }, Math.max(staleMs / 2, 1000));
  };
  keepFresh();
  return () => {
    if (refresh) clearTimeout(refresh);
    removeLockDir(dir);
  };
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
