import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { assertNoLinkBelowHome } from '../store/home-guard.js';
import { openStateFile } from '../store/state-file.js';

const COPY_CHUNK_BYTES = 1024 * 1024;
/** Bytes looked at from the end of a part to drop its trailing whitespace (a longer run of it is kept). */
const TRIM_WINDOW_BYTES = 64 * 1024;

export interface JoinedPart {
  /** The part's heading line (`### agent #j`). */
  heading: string;
  /** The file holding the part's text, or null for a member that produced none. */
  file: string | null;
}

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/** The end offset of the text in `fd` without its trailing whitespace (as String.prototype.trimEnd would, for ASCII). */
function trimmedEnd(fd: number, size: number): number {
  const len = Math.min(size, TRIM_WINDOW_BYTES);
  const buf = Buffer.allocUnsafe(len);
  const got = fs.readSync(fd, buf, 0, len, size - len);
  let end = got;
  while (end > 0 && (buf[end - 1] === 0x20 || (buf[end - 1]! >= 0x09 && buf[end - 1]! <= 0x0d))) end--;
  return size - got + end;
}

function writeAll(fd: number, b: Buffer): void {
  let off = 0;
  while (off < b.length) off += fs.writeSync(fd, b, off, b.length - off);
}

/**
 * Writes a parallel group's output — each member's text under its heading, joined by a blank line — to `target` by
 * copying each member's file through one buffer: the runner's memory stays flat however large the members' outputs
 * are (joined in memory, 9 members × 64 MiB took over a GiB and then broke on the string length limit). The event
 * loop gets a turn between chunks (a cancel request is still seen). Written under a temp name and renamed over
 * `target`, like every state write; not fsynced (an output, not an acknowledgement). Returns the bytes written.
 */
export async function writeJoinedOutput(target: string, parts: JoinedPart[]): Promise<number> {
  assertNoLinkBelowHome(target);
  const tmp = path.join(path.dirname(target), `.${path.basename(target)}.${process.pid}.${randomBytes(6).toString('hex')}.tmp`);
  const out = fs.openSync(tmp, fs.constants.O_CREAT | fs.constants.O_EXCL | fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW, 0o600);
  let written = 0;
  const put = (b: Buffer) => { writeAll(out, b); written += b.length; };
  const buf = Buffer.allocUnsafe(COPY_CHUNK_BYTES);
  try {
    for (const [i, part] of parts.entries()) {
      if (i > 0) put(Buffer.from('\n\n'));
      let opened: { fd: number; size: number } | null = null;
      try { opened = part.file === null ? null : openStateFile(part.file, part.file); } catch { /* not a regular file: no text */ }
      if (opened === null) { put(Buffer.from(part.heading)); continue; }
      try {
        const end = trimmedEnd(opened.fd, opened.size);
        put(Buffer.from(end > 0 ? `${part.heading}\n\n` : part.heading));
        for (let pos = 0; pos < end; ) {
          const n = fs.readSync(opened.fd, buf, 0, Math.min(buf.length, end - pos), pos);
          if (n === 0) break;
          put(buf.subarray(0, n));
          pos += n;
          await nextTurn();
        }
      } finally {
        fs.closeSync(opened.fd);
      }
    }
    fs.closeSync(out);
    fs.renameSync(tmp, target);
    return written;
  } catch (e) {
    try { fs.closeSync(out); } catch { /* closed */ }
    try { fs.unlinkSync(tmp); } catch { /* not made */ }
    throw e;
  }
}

/**
 * A step's text for `{previous}`, bounded: the whole text up to `capBytes`, else its head and tail around a marker
 * that gives the byte counts and the file holding all of it (a later agent can be told to read that file).
 */
export function boundedStepText(file: string | null, capBytes: number): string {
  if (file === null) return '';
  let opened: { fd: number; size: number } | null = null;
  try { opened = openStateFile(file, file); } catch { return ''; }
  if (opened === null) return '';
  const { fd, size } = opened;
  const read = (len: number, pos: number) => {
    const b = Buffer.allocUnsafe(len);
    const n = fs.readSync(fd, b, 0, len, pos);
    return b.subarray(0, n).toString('utf8');
  };
  try {
    if (size <= capBytes) return read(size, 0);
    const half = Math.floor(capBytes / 2);
    return `${read(half, 0)}\n…[${size - 2 * half} of ${size} bytes omitted; the whole text is in ${file}]…\n${read(half, size - half)}`;
  } catch {
    return '';
  } finally {
    fs.closeSync(fd);
  }
}
