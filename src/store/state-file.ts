import fs from 'node:fs';
import { SubagentError } from '../errors.js';
import { assertNoLinkBelowHome } from './home-guard.js';

const { O_RDONLY, O_NOFOLLOW, O_NONBLOCK } = fs.constants;

/**
 * The largest JSON state file read whole (a status, a record, the ledger, an index). Real ones are a few KiB to a few
 * MiB; a bigger one is damage or a hostile file, and reading and parsing it would hold the event loop for seconds.
 */
export const MAX_STATE_FILE_BYTES = 16 * 1024 * 1024;

/** What a file of the state home is, for messages: never its content. */
function kindOf(st: fs.Stats): string {
  if (st.isDirectory()) return 'a directory';
  if (st.isFIFO()) return 'a FIFO';
  if (st.isSocket()) return 'a socket';
  if (st.isCharacterDevice() || st.isBlockDevice()) return 'a device';
  return 'not a regular file';
}

/**
 * Opens a state-home file for reading without blocking and without following a symlink in its last component, and
 * checks that it is a regular file of at most `maxBytes`: a FIFO put in place of a state file would block a plain
 * open (and the read after it) forever, taking every tool call of the server with it. Returns null when the file
 * does not exist; anything else that is not a readable regular file is STATE_CORRUPT naming `label`.
 */
export function openStateFile(file: string, label: string, maxBytes = Infinity): { fd: number; size: number } | null {
  assertNoLinkBelowHome(file);
  let fd: number;
  try {
    // O_NONBLOCK: opening a FIFO for reading returns at once instead of waiting for a writer.
    fd = fs.openSync(file, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'ENOENT' || code === 'ENOTDIR') return null;
    if (code === 'ELOOP') throw new SubagentError('STATE_CORRUPT', `${label} is a symlink; state files are never read through one. Remove it.`);
    throw new SubagentError('STATE_CORRUPT', `${label} cannot be opened (${code ?? 'error'}); inspect or remove it.`);
  }
  let st: fs.Stats;
  try {
    st = fs.fstatSync(fd);
  } catch (e) {
    fs.closeSync(fd);
    throw new SubagentError('STATE_CORRUPT', `${label} cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'}); inspect or remove it.`);
  }
  if (!st.isFile()) {
    fs.closeSync(fd);
    throw new SubagentError('STATE_CORRUPT', `${label} is ${kindOf(st)}, not a regular file; the state home was tampered with. Other runs are unaffected; remove it.`);
  }
  if (st.size > maxBytes) {
    fs.closeSync(fd);
    throw new SubagentError('STATE_CORRUPT', `${label} is ${st.size} bytes, more than any state file (${maxBytes}); the file is damaged. Other runs are unaffected; inspect or remove it.`);
  }
  return { fd, size: st.size };
}

/** A state file's whole text (see openStateFile); null when it does not exist. */
export function readStateText(file: string, label: string, maxBytes = MAX_STATE_FILE_BYTES): string | null {
  const opened = openStateFile(file, label, maxBytes);
  if (opened === null) return null;
  try {
    // Read at most what fstat said plus one byte: a file that grows meanwhile cannot make this read unbounded. State
    // files are replaced whole, never written in place: once fstat's size is read, the read that would find the end
    // is skipped (one syscall of each of the dozen state-file reads a run costs the server), except at the bound.
    const buf = Buffer.allocUnsafe(Math.min(opened.size, maxBytes) + 1);
    const enough = opened.size < maxBytes ? opened.size : buf.length;
    let got = 0;
    while (got < enough) {
      const n = fs.readSync(opened.fd, buf, got, buf.length - got, got);
      if (n === 0) break;
      got += n;
    }
    if (got > maxBytes) throw new SubagentError('STATE_CORRUPT', `${label} grew past ${maxBytes} bytes while being read; the file is damaged. Inspect or remove it.`);
    return buf.subarray(0, got).toString('utf8');
  } catch (e) {
    if (e instanceof SubagentError) throw e;
    throw new SubagentError('STATE_CORRUPT', `${label} cannot be read (${(e as NodeJS.ErrnoException).code ?? 'error'}); inspect or remove it.`);
  } finally {
    fs.closeSync(opened.fd);
  }
}
