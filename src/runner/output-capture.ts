import fs from 'node:fs';

const { O_CREAT, O_WRONLY, O_TRUNC, O_NOFOLLOW, O_APPEND } = fs.constants;

/**
 * Writes a stream's bytes to a file up to `capBytes`, counting every byte even past the cap. Each chunk is written
 * synchronously as it arrives, so memory stays flat however much the agent prints (the pipe applies back-pressure).
 */
export class OutputCapture {
  private fd: number;
  bytes = 0;
  stored = 0;
  constructor(file: string, private readonly capBytes: number) {
    this.fd = fs.openSync(file, O_CREAT | O_WRONLY | O_TRUNC | O_APPEND | O_NOFOLLOW, 0o600);
  }
  get truncated(): boolean {
    return this.bytes > this.stored;
  }
  write(chunk: Buffer): void {
    this.bytes += chunk.length;
    if (this.stored >= this.capBytes || this.fd < 0) return;
    const part = chunk.length <= this.capBytes - this.stored ? chunk : chunk.subarray(0, this.capBytes - this.stored);
    let off = 0;
    while (off < part.length) off += fs.writeSync(this.fd, part, off);
    this.stored += part.length;
  }
  close(): void {
    if (this.fd >= 0) fs.closeSync(this.fd);
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
