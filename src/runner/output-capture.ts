import fs from 'node:fs';
import { assertNoLinkBelowHome } from '../store/home-guard.js';

const { O_CREAT, O_WRONLY, O_TRUNC, O_NOFOLLOW, O_APPEND, O_NONBLOCK } = fs.constants;

/**
 * Room given back when the disk refuses a write: the output that filled the disk is cut by this much, so the runner
 * can still write the step's status and the run's end (a few KiB) on the same file system.
 */
export const DISK_FULL_RELEASE_BYTES = 256 * 1024;

/**
 * Writes a stream's bytes to a file up to `capBytes`, counting every byte even past the cap. Each chunk is written
 * synchronously as it arrives, so memory stays flat however much the agent prints (the pipe applies back-pressure).
 * A write the disk refuses (ENOSPC, EDQUOT, EIO …) is never thrown: it runs inside a socket's read callback, where a
 * throw killed the runner and left the agent unsupervised. The capture stops storing, keeps counting, and says why
 * in `writeError`; the caller ends the step failed with that cause.
 */
export class OutputCapture {
  private fd: number;
  bytes = 0;
  stored = 0;
  /** The errno of the first write the disk refused, or null. */
  writeError: string | null = null;
  /** The last bytes past the cap (at most `tailBytes`, and a chunk), kept when asked for. */
  private tail: Buffer[] = [];
  private tailLength = 0;
  /**
   * `tailBytes`: also keep the stream's last bytes past the cap, appended at `close` after a marker that counts what
   * was left out. For stderr, whose end says why an agent failed: a CLI that logged more than the cap before it died
   * would otherwise be reported by its first lines.
   */
  constructor(file: string, private readonly capBytes: number, private readonly tailBytes = 0) {
    assertNoLinkBelowHome(file);
    this.fd = fs.openSync(file, O_CREAT | O_WRONLY | O_TRUNC | O_APPEND | O_NOFOLLOW | O_NONBLOCK, 0o600);
  }
  get truncated(): boolean {
    return this.bytes > this.stored;
  }
  write(chunk: Buffer): void {
    this.bytes += chunk.length;
    if (this.stored >= this.capBytes || this.fd < 0 || this.writeError !== null) {
      if (this.tailBytes > 0 && this.fd >= 0 && this.writeError === null) this.keepTail(chunk);
      return;
    }
    const room = this.capBytes - this.stored;
    if (chunk.length > room && this.tailBytes > 0) this.keepTail(chunk.subarray(room));
    const part = chunk.length <= room ? chunk : chunk.subarray(0, room);
    let off = 0;
    try {
      while (off < part.length) off += fs.writeSync(this.fd, part, off);
    } catch (e) {
      this.stored += off;
      this.refused(e);
      return;
    }
    this.stored += part.length;
  }
  private refused(e: unknown): void {
    this.writeError = (e as NodeJS.ErrnoException).code ?? 'EIO';
    // Give back room for the run's own records: what is kept is the head, marked truncated (the count goes on).
    const keep = Math.max(0, this.stored - DISK_FULL_RELEASE_BYTES);
    try { fs.ftruncateSync(this.fd, keep); this.stored = keep; } catch { /* the count of what was stored stands */ }
  }
  private keepTail(part: Buffer): void {
    this.tail.push(Buffer.from(part)); // a copy: a stream may reuse its read buffer
    this.tailLength += part.length;
    while (this.tail.length > 1 && this.tailLength - this.tail[0]!.length >= this.tailBytes) this.tailLength -= this.tail.shift()!.length;
  }
  /** Appends the kept tail (after a marker when bytes between the head and it were left out). */
  private writeTail(): void {
    if (this.tailLength === 0 || this.fd < 0 || this.writeError !== null) return;
    let tail = Buffer.concat(this.tail);
    if (tail.length > this.tailBytes) tail = tail.subarray(tail.length - this.tailBytes);
    const omitted = this.bytes - this.stored - tail.length;
    const marker = omitted > 0 ? Buffer.from(`\n…[${omitted} bytes omitted]…\n`) : Buffer.alloc(0);
    try {
      for (const b of [marker, tail]) for (let off = 0; off < b.length;) off += fs.writeSync(this.fd, b, off);
    } catch { /* the head stays; the count stands */ }
    this.tail = [];
    this.tailLength = 0;
  }
  close(): void {
    this.writeTail();
    try { if (this.fd >= 0) fs.closeSync(this.fd); } catch { /* a deferred write error: already counted */ }
    this.fd = -1;
  }
}

/** Splits a byte stream into lines for an adapter's parser; a line longer than `maxLineBytes` is cut, not buffered whole. */
export class LineSplitter {
  private carry: Buffer[] = [];
  private carryBytes = 0;
  constructor(private readonly onLine: (line: string) => void, private readonly maxLineBytes = 16 * 1024 * 1024) {}
  write(chunk: Buffer): void {
    let start = 0;
    for (;;) {
      const nl = chunk.indexOf(10, start);
      if (nl < 0) break;
      this.push(chunk.subarray(start, nl));
      this.flushLine();
      start = nl + 1;
    }
    if (start < chunk.length) this.push(chunk.subarray(start));
  }
  end(): void {
    if (this.carryBytes > 0) this.flushLine();
  }
  private push(part: Buffer): void {
    const room = this.maxLineBytes - this.carryBytes;
    if (room <= 0) return;
    const kept = part.length <= room ? part : part.subarray(0, room);
    this.carry.push(Buffer.from(kept));
    this.carryBytes += kept.length;
  }
  private flushLine(): void {
    const line = Buffer.concat(this.carry).toString('utf8');
    this.carry = [];
    this.carryBytes = 0;
    this.onLine(line.endsWith('\r') ? line.slice(0, -1) : line);
  }
}
