import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { fsPort } from './fs-port.js';

const { O_CREAT, O_EXCL, O_WRONLY, O_NOFOLLOW, O_RDONLY, O_DIRECTORY } = fs.constants;

export interface AtomicWriteOptions {
  /** fsync file and directory: for acknowledgements, terminal transitions and shared ledgers (SPEC §8.1). */
  durable?: boolean;
}

/**
 * Replaces `file` whole or not at all. The temp name is unique per writer (several processes write the same
 * state files) and opened O_EXCL|O_NOFOLLOW so a planted symlink can never redirect the write; rename(2) replaces
 * a symlink at the destination rather than following it.
 */
export function writeFileAtomic(file: string, data: string | Uint8Array, options: AtomicWriteOptions = {}): void {
  const durable = options.durable ?? true;
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  const bytes = typeof data === 'string' ? Buffer.from(data) : data;
  let fd: number | undefined;
  try {
    fd = fsPort.openSync(tmp, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW, 0o600);
    let off = 0;
    while (off < bytes.length) off += fsPort.writeSync(fd, bytes.subarray(off));
    if (durable) fsPort.fsyncSync(fd);
    fsPort.closeSync(fd);
    fd = undefined;
    fsPort.renameSync(tmp, file);
  } catch (e) {
    if (fd !== undefined) try { fs.closeSync(fd); } catch { /* already failing */ }
    try { fs.unlinkSync(tmp); } catch { /* never created */ }
    throw e;
  }
  if (durable) fsyncDir(dir);
}

/**
 * Creates `file` with `data` only if it does not exist yet: the compare-and-set of files. Returns false when another
 * writer got there first. The content is complete before the name appears (link of a fully written temp).
 */
export function createFileExclusive(file: string, data: string): boolean {
  const dir = path.dirname(file);
  const tmp = path.join(dir, `.${path.basename(file)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  let fd: number | undefined;
  try {
    fd = fsPort.openSync(tmp, O_CREAT | O_EXCL | O_WRONLY | O_NOFOLLOW, 0o600);
    fsPort.writeSync(fd, Buffer.from(data));
    fsPort.fsyncSync(fd);
    fsPort.closeSync(fd);
    fd = undefined;
    try {
      fsPort.linkSync(tmp, file);
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code === 'EEXIST') return false;
      throw e;
    }
    fsyncDir(dir);
    return true;
  } finally {
    if (fd !== undefined) try { fs.closeSync(fd); } catch { /* ignore */ }
    try { fs.unlinkSync(tmp); } catch { /* ignore */ }
  }
}

export function fsyncDir(dir: string): void {
  let fd: number | undefined;
  try {
    fd = fs.openSync(dir, O_RDONLY | O_DIRECTORY);
    fsPort.fsyncSync(fd);
  } catch (e) {
    // Some file systems refuse fsync on a directory; the rename itself already happened.
    if (!['EINVAL', 'ENOTSUP', 'EISDIR', 'EPERM'].includes((e as NodeJS.ErrnoException).code ?? '')) throw e;
  } finally {
    if (fd !== undefined) fs.closeSync(fd);
  }
}

/** Makes a private directory (0700); refuses an existing symlink in its place. */
export function ensurePrivateDir(dir: string): void {
  try {
    fsPort.mkdirSync(dir, { mode: 0o700 });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'EEXIST') throw e;
  }
  const st = fs.lstatSync(dir);
  if (!st.isDirectory()) throw Object.assign(new Error(`${dir} is not a directory`), { code: 'ENOTDIR' });
}
