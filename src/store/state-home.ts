import fs from 'node:fs';
import path from 'node:path';
import { ensurePrivateDir, removeStaleTemps } from './atomic-write.js';
import { readDirSnapshot, type DirSnapshot } from './dir-snapshot.js';

export class UnsafeStateHomeError extends Error {}

/**
 * Checks the state home before anything is written into it: the home holds prompts and outputs, so a symlinked,
 * foreign-owned or group/world-writable home would let another user read or redirect them.
 */
export function checkStateHome(home: string): { problems: string[]; exists: boolean } {
  const problems: string[] = [];
  let st: fs.Stats;
  try {
    st = fs.lstatSync(home);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return { problems: creatable(home), exists: false };
    if (code === 'ENOTDIR') return { problems: [`${home} cannot be a directory: a part of its path is a file; choose another SUBAGENTS_HOME`], exists: false };
    if (code === 'EACCES') return { problems: [`${home} cannot be read: permission denied on a part of its path; choose another SUBAGENTS_HOME`], exists: false };
    return { problems: [`${home} cannot be used (${code ?? 'error'}); choose another SUBAGENTS_HOME`], exists: false };
  }
  if (st.isSymbolicLink()) problems.push(`${home} is a symlink; point SUBAGENTS_HOME at the real directory`);
  else if (!st.isDirectory()) problems.push(`${home} is not a directory`);
  else {
    if (typeof process.getuid === 'function' && st.uid !== process.getuid()) {
      problems.push(`${home} is owned by uid ${st.uid}, not by this user (uid ${process.getuid()})`);
    }
    if ((st.mode & 0o022) !== 0) {
      problems.push(`${home} is group- or world-writable (mode ${(st.mode & 0o777).toString(8)}); run: chmod 700 ${home}`);
    }
  }
  return { problems, exists: true };
}

/**
 * Why a missing home could not be made, as far as a look can tell: its nearest existing ancestor must be a
 * directory (not a dangling link, not a file) this user may write into.
 */
function creatable(home: string): string[] {
  let up = path.dirname(path.resolve(home));
  for (;;) {
    try { fs.lstatSync(up); break; } catch { /* missing too: made with it */ }
    const next = path.dirname(up);
    if (next === up) break;
    up = next;
  }
  try {
    if (!fs.statSync(up).isDirectory()) return [`${home} cannot be made: ${up} is not a directory; choose another SUBAGENTS_HOME`];
    fs.accessSync(up, fs.constants.W_OK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    return [code === 'ENOENT'
      ? `${home} cannot be made: ${up} is a symlink to nothing (an unmounted volume?); choose another SUBAGENTS_HOME`
      : `${home} cannot be made: ${up} is not writable by this user (${code ?? 'error'}); choose another SUBAGENTS_HOME`];
  }
  return [];
}

/**
 * Makes the home and its missing ancestors (0700) one by one: Node's recursive mkdir loops forever where a parent
 * exists but the child cannot be made (a path under /proc), and its errors do not say which setting is at fault.
 */
function makeHome(home: string): void {
  const missing: string[] = [];
  for (let p = path.resolve(home); ; p = path.dirname(p)) {
    try { fs.lstatSync(p); break; } catch { missing.unshift(p); }
    if (path.dirname(p) === p) break;
  }
  for (const dir of missing) {
    try {
      fs.mkdirSync(dir, { mode: 0o700 });
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      if (code !== 'EEXIST') throw new UnsafeStateHomeError(`unusable state home: ${home} cannot be made (${code ?? 'error'} at ${dir}); choose another SUBAGENTS_HOME, or make the directory yourself (mode 700)`);
    }
  }
}

/** The home's fixed directories and its one shared file, each of which must be what it is named (or absent). */
const HOME_DIRS = ['runs', 'agents', 'locks', 'index', 'sessions', 'warm'];
const HOME_FILES = ['ledger.json'];

/**
 * What stands in the place of a fixed entry of a (safe) state home and would fail every launch: a file where a
 * directory goes, a directory or link where the ledger goes. Each problem says what to remove; the server makes the
 * directories again and rebuilds the ledger from the runs.
 */
export function checkHomeEntries(home: string): string[] {
  const problems: string[] = [];
  const kindOf = (st: fs.Stats) => (st.isSymbolicLink() ? 'a symlink' : st.isDirectory() ? 'a directory' : st.isFile() ? 'a file' : 'not a regular file');
  for (const name of [...HOME_DIRS, ...HOME_FILES]) {
    const p = path.join(home, name);
    let st: fs.Stats;
    try { st = fs.lstatSync(p); } catch { continue; /* absent: made when needed */ }
    const dir = HOME_DIRS.includes(name);
    if (dir ? st.isDirectory() : st.isFile()) continue;
    problems.push(dir
      ? `${p} is ${kindOf(st)}, not a directory; remove it (the server makes the directory again)`
      : `${p} is ${kindOf(st)}, not the ledger file; remove it (the ledger is rebuilt from the runs)`);
  }
  return problems;
}

/**
 * Creates (0700) and validates the state home and its fixed subdirectories; throws UnsafeStateHomeError with
 * people-readable reasons. Returns what it read of `runs/`, for the run listing's first look (one read, not two).
 */
export function openStateHome(home: string): { runs: DirSnapshot | null } {
  const before = checkStateHome(home);
  if (before.problems.length) throw new UnsafeStateHomeError(`unsafe state home: ${before.problems.join('; ')}`);
  if (!before.exists) makeHome(home);
  const after = checkStateHome(home);
  if (after.problems.length) throw new UnsafeStateHomeError(`unsafe state home: ${after.problems.join('; ')}`);
  const broken = checkHomeEntries(home);
  if (broken.length) throw new UnsafeStateHomeError(`unusable state home: ${broken.join('; ')}`);
  for (const sub of ['runs', 'agents', 'locks']) ensurePrivateDir(path.join(home, sub));
  const runs = readDirSnapshot(path.join(home, 'runs'));
  if (runs) sweepAbandonedRunTemps(path.join(home, 'runs'), runs.names);
  // Temp files of shared files (ledger, session registry) whose writer was killed mid-write.
  removeStaleTemps(home, null, false);
  removeStaleTemps(path.join(home, 'sessions'), null, false);
  return { runs };
}

/** Removes run directories a killed server left half-built (`.r-….<pid>.<rand>.tmp`, see RunStore.prepare) once their writer is gone. */
function sweepAbandonedRunTemps(runsDir: string, names: string[]): void {
  for (const n of names) {
    const m = /^\.r-[A-Za-z0-9_-]{24}\.(\d+)\.[0-9a-f]+\.tmp$/.exec(n);
    if (!m) continue;
    let writerAlive = true;
    try { process.kill(Number(m[1]), 0); } catch (e) { writerAlive = (e as NodeJS.ErrnoException).code === 'EPERM'; }
    if (!writerAlive) try { fs.rmSync(path.join(runsDir, n), { recursive: true, force: true }); } catch { /* next start */ }
  }
}
