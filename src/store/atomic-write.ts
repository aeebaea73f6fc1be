import fs from 'node:fs';
import path from 'node:path';
import { SubagentError } from '../errors.js';
import { fsPort } from './fs-port.js';
import { assertNoLinkBelowHome } from './home-guard.js';
import { pinForFree, unpinLater } from './deferred-free.js';

const { O_CREAT, O_EXCL, O_WRONLY, O_NOFOLLOW, O_RDONLY, O_DIRECTORY } = fs.constants;

export interface AtomicWriteOptions {
  /** fsync file and directory: for acknowledgements, terminal transitions and shared ledgers (docs/contract.md, invariant 1). */
  durable?: boolean;
  /**
   * With `durable`: also fsync the directory (default). A caller that builds a directory not yet visible and fsyncs
   * it once before publishing it passes false: one directory fsync instead of one per file.
   */
  syncDir?: boolean;
}

/**
 * Replaces `file` whole or not at all. The temp name is unique per writer (several processes write the same
 * state files) and opened O_EXCL|O_NOFOLLOW so a planted symlink can never redirect the write; rename(2) replaces
 * a symlink at the destination rather than following it.
 */
export function writeFileAtomic(file: string, data: string | Uint8Array, options: AtomicWriteOptions = {}): void {
  const durable = options.durable ?? true;
  const { tmp, fd } = openTemp(file, data);
  try {
    if (durable) fsPort.fsyncSync(fd);
  } catch (e) {
    abandonTemp(tmp, fd);
    throw writeFailure(file, e);
  }
  publishTemp(file, tmp, fd);
  if (durable && options.syncDir !== false) fsyncDir(path.dirname(file));
}

/**
 * `writeFileAtomic` with its fsyncs on the thread pool: the event loop serves other requests while the disk commits
 * (a durable write under a shared lock took ~8 ms of a loaded server's loop, twice per launch).
 */
export async function writeFileAtomicAsync(file: string, data: string | Uint8Array, options: AtomicWriteOptions = {}): Promise<void> {
  const durable = options.durable ?? true;
  const { tmp, fd } = openTemp(file, data);
  try {
    if (durable) await fsPort.fsync(fd);
  } catch (e) {
    abandonTemp(tmp, fd);
    throw writeFailure(file, e);
  }
  publishTemp(file, tmp, fd);
  if (durable && options.syncDir !== false) await fsyncDirAsync(path.dirname(file));
}

/** A durable replace begun by `beginDurableReplace`, finished by `commit`. */
export interface PendingReplace {
  /** Waits for the file's fsync, renames it into place and fsyncs the directory; a failure throws as `writeFileAtomic`'s. */
  commit(): Promise<void>;
}

/**
 * `writeFileAtomic` (durable) in two halves, for a writer with other work to do before the new version may show: the
 * temp is written now and its fsync runs on the thread pool meanwhile; `commit` publishes it. The disk's wait then
 * overlaps that work instead of following it. Throws now what writing the temp throws.
 */
export function beginDurableReplace(file: string, data: string): PendingReplace {
  const { tmp, fd } = openTemp(file, data);
  const synced = fsPort.fsync(fd);
  synced.catch(() => {}); // observed by commit
  return {
    async commit() {
      try {
        await synced;
      } catch (e) {
        abandonTemp(tmp, fd);
        throw writeFailure(file, e);
      }
      publishTemp(file, tmp, fd);
      fsyncDir(path.dirname(file));
    },
  };
}

let tempSeq = 0;

/**
 * A temp name beside `file` that no other writer uses: the pid and a counter are unique among live processes, and the
 * random tail keeps a dead writer's leftover (its pid since reused) from colliding; O_EXCL refuses any collision
 * anyway. Not node:crypto: the runner writes before it reports ready, and loading crypto cost ~4 ms of every launch.
 */
export function tempNameFor(file: string): string {
  // Hex only: removeStaleTemps (and doctor) know a temp by `.<name>.<pid>.<hex>.tmp`. The tail is fixed-width, so
  // counter + tail never reads the same for two counters.
  const tail = Math.floor(Math.random() * 0x1000000).toString(16).padStart(6, '0');
  return path.join(path.dirname(file), `.${path.basename(file)}.${process.pid}.${(tempSeq++).toString(16)}${tail}.tmp`);
}

/** A unique temp beside `file`, written whole (not yet synced). */
function openTemp(file: string, data: string | Uint8Array): { tmp: string; fd: number } {
  const tmp = tempNameFor(file);
  const bytes = typeof data === 'string' ? Buffer.from(data) : data;
  let fd: number | undefined;
  assertNoLinkBelowHome(file);
  try {
    fd = fsPort.openSync(tmp, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW, 0o600);
    let off = 0;
    while (off < bytes.length) off += fsPort.writeSync(fd, bytes.subarray(off));
    return { tmp, fd };
  } catch (e) {
    if (fd !== undefined) abandonTemp(tmp, fd); // not opened: the name may be another writer's (EEXIST), leave it
    throw writeFailure(file, e);
  }
}

/**
 * Closes the temp and renames it over `file`. The file it replaces is freed on the thread pool, not here
 * (store/deferred-free.ts): every status and ledger write replaces one.
 */
function publishTemp(file: string, tmp: string, fd: number): void {
  let open = true;
  let replaced: number | null = null;
  try {
    fsPort.closeSync(fd);
    open = false;
    replaced = pinForFree(file);
    fsPort.renameSync(tmp, file);
  } catch (e) {
    abandonTemp(tmp, open ? fd : undefined);
    throw writeFailure(file, e);
  } finally {
    unpinLater(replaced);
  }
}

function abandonTemp(tmp: string, fd: number | undefined): void {
  if (fd !== undefined) try { fs.closeSync(fd); } catch { /* already failing */ }
  try { fs.unlinkSync(tmp); } catch { /* never created */ }
}

/** What a disk refuses with: full, quota, permissions, read-only, I/O error, too many files. */
const DISK_FAULTS = new Set(['ENOSPC', 'EDQUOT', 'EACCES', 'EPERM', 'EROFS', 'EIO', 'EFBIG', 'EMFILE', 'ENFILE']);

/**
 * The errno of a disk fault (raw, or the cause of the refusal `writeFailure` made of it), else null: what a writer
 * with no caller to answer (the runner) retries a few times before it degrades.
 */
export function diskFaultOf(e: unknown): string | null {
  const inner = e instanceof SubagentError ? e.cause : e;
  const code = (inner as NodeJS.ErrnoException | undefined)?.code;
  return code && DISK_FAULTS.has(code) ? code : null;
}

/**
 * A state write the disk refused becomes a refusal naming what was being written (F6): the caller's tool answers
 * with it, and nothing else was changed (the temp file is already gone, the old file untouched). Other errors pass.
 */
export function writeFailure(file: string, e: unknown): unknown {
  const code = (e as NodeJS.ErrnoException | undefined)?.code;
  if (!code || !DISK_FAULTS.has(code)) return e;
  return new SubagentError('INTERNAL', `could not write ${describeStateFile(file)} (${code}); its previous version is unchanged and nothing else was done. Check free space and permissions of the state home, then retry.`, { cause: e });
}

/** `status.json of run r-…`, `the capacity ledger (ledger.json)`, `the session registry (sessions/x.json)`. */
export function describeStateFile(file: string): string {
  const parts = file.split(path.sep);
  const base = path.basename(file);
  const runs = parts.lastIndexOf('runs');
  if (runs >= 0 && runs + 2 < parts.length) return `${parts.slice(runs + 2).join('/')} of run ${parts[runs + 1]}`;
  if (base === 'ledger.json') return 'the capacity ledger (ledger.json)';
  if (parts.at(-2) === 'sessions') return `the session registry (sessions/${base})`;
  if (parts.at(-3) === 'lineage') return `the session registry (lineage/${parts.at(-2)}/${base})`;
  if (parts.at(-2) === 'index') return `the run index (index/${base})`;
  return base;
}

/**
 * Creates `file` with `data` only if it does not exist yet: the compare-and-set of files. Returns false when another
 * writer got there first. The content is complete before the name appears (link of a fully written temp).
 */
export function createFileExclusive(file: string, data: string, options: AtomicWriteOptions = {}): boolean {
  const durable = options.durable ?? true;
  const dir = path.dirname(file);
  const tmp = tempNameFor(file);
  let fd: number | undefined;
  let opened = false;
  let linking = false;
  try {
    fd = fsPort.openSync(tmp, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW, 0o600);
    opened = true;
    fsPort.writeSync(fd, Buffer.from(data));
    if (durable) fsPort.fsyncSync(fd);
    fsPort.closeSync(fd);
    fd = undefined;
    linking = true;
    fsPort.linkSync(tmp, file);
  } catch (e) {
    if (linking && (e as NodeJS.ErrnoException).code === 'EEXIST') return false;
    throw writeFailure(file, e);
  } finally {
    if (fd !== undefined) try { fs.closeSync(fd); } catch { /* ignore */ }
    if (opened) try { fs.unlinkSync(tmp); } catch { /* ignore */ } // else the name may be another writer's
  }
  if (durable) fsyncDir(dir);
  return true;
}

/**
 * fsyncs files written by `createNewFile`, all at once on the thread pool (concurrent fsyncs share the journal's
 * commits, and the event loop serves other requests meanwhile), then closes them (a failed close is a failed write).
 * For files in a directory not yet published.
 */
export async function fsyncAndClose(files: Array<{ file: string; fd: number }>): Promise<void> {
  await Promise.all(files.map(async ({ file, fd }) => {
    let open = true;
    try {
      await fsPort.fsync(fd);
      open = false;
      fsPort.closeSync(fd);
    } catch (e) {
      throw writeFailure(file, e);
    } finally {
      if (open) try { fs.closeSync(fd); } catch { /* already failing */ }
    }
  }));
}

/** `fsyncDir` on the thread pool. */
export async function fsyncDirAsync(dir: string): Promise<void> {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY);
    await fsPort.fsync(fd);
  } catch (e) {
    if (!DIR_FSYNC_REFUSED.includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** Some file systems refuse fsync on a directory; the rename itself already happened. */
const DIR_FSYNC_REFUSED = ['EINVAL', 'ENOTSUP', 'EISDIR', 'EPERM'];

export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY);
    fsPort.fsyncSync(fd);
  } catch (e) {
    if (!DIR_FSYNC_REFUSED.includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** Makes a private directory (0700); refuses an existing symlink in its place. True when it made the directory. */
export function ensurePrivateDir(dir: string): boolean {
  try {
    fsPort.mkdirSync(dir, { mode: 0o700 });
    return true; // made here: mkdir(2) never follows a symlink at the last component (it fails EEXIST on one)
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const st = fs.lstatSync(dir);
  // Something else in a directory's place (a file, a link) fails every write below it: coded, with what to do.
  if (!st.isDirectory()) throw new SubagentError('STATE_CORRUPT', `${dir} is not a directory (something else is in its place); remove it and retry: it is made again.`);
  return false;
}

/**
 * `ensurePrivateDir` for a directory that will hold acknowledged files (docs/contract.md, invariant 1): its name is fsynced in the
 * parent, or a crash of the machine could lose it with the durable file inside. Also when it already existed: another
 * process may have made it a moment ago and not have fsynced the parent yet (two nested launches from one run).
 */
export function ensureDurablePrivateDir(dir: string): void {
  ensurePrivateDir(dir);
  fsyncDir(path.dirname(dir));
}

/**
 * Creates `file` with `data` where no reader can meet it half written, so without a temp and a rename of its own:
 * in a directory nobody sees yet (built under a hidden name; renaming the directory publishes its files whole), a
 * signal file whose name is the whole message, or a file whose one reader takes it cut short for none (the warm
 * pool's claim). O_EXCL and O_NOFOLLOW all the same: an existing name, even a planted symlink, is refused (EEXIST)
 * rather than written through. Not fsynced.
 */
export function writeNewFile(file: string, data: string | Uint8Array): void {
  const fd = createNewFile(file, data);
  try {
    fsPort.closeSync(fd); // a failed close is a failed write (EIO on some file systems)
  } catch (e) {
    throw writeFailure(file, e);
  }
}

/**
 * `writeNewFile` that leaves the file open, for `fsyncAndClose`: a directory built to be published fsyncs what it
 * wrote through the descriptors it wrote with, rather than opening every file again.
 */
export function createNewFile(file: string, data: string | Uint8Array): number {
  let fd: number | undefined;
  assertNoLinkBelowHome(file);
  try {
    fd = fsPort.openSync(file, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW, 0o600);
    const bytes = Buffer.from(data);
    let off = 0;
    while (off < bytes.length) off += fsPort.writeSync(fd, bytes.subarray(off));
    return fd;
  } catch (e) {
    if (fd !== undefined) try { fs.closeSync(fd); } catch { /* already failing */ }
    throw writeFailure(file, e);
  }
}

/**
 * Removes the temp files a writer killed mid-write left under `dir` (recursively): `.<name>.<pid>.<hex>.tmp` whose
 * pid is `pid`, or — with `pid` null — whose pid is no longer alive. Only call it for a writer proven gone.
 */
export function removeStaleTemps(dir: string, pid: number | null, recursive = true): number {
  let removed = 0;
  let entries: fs.Dirent[];
  try { entries = fs.readdirSync(dir, { withFileTypes: true }); } catch { return 0; }
  for (const e of entries) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) { if (recursive) removed += removeStaleTemps(p, pid, true); continue; }
    const m = /^\..+\.(\d+)\.[0-9a-f]+\.tmp$/.exec(e.name);
    if (!m) continue;
    const owner = Number(m[1]);
    if (pid !== null ? owner !== pid : pidExists(owner)) continue;
    try { fs.unlinkSync(p); removed++; } catch { /* gone */ }
  }
  return removed;
}

function pidExists(pid: number): boolean {
  try { process.kill(pid, 0); return true; } catch (e) { return (e as NodeJS.ErrnoException).code === 'EPERM'; }
}
