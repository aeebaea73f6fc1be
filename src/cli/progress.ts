import fs from 'node:fs';

/**
 * Live progress for a person: on a terminal one status line redrawn in place; elsewhere (a pipe, a log file, CI) only
 * plain lines, written once, so captured output stays readable.
 */
export class Progress {
  private shown = '';
  private atLineStart = true;
  readonly tty: boolean;
  constructor(private readonly stream: NodeJS.WriteStream = process.stderr, tty?: boolean) {
    this.tty = tty ?? (stream.isTTY === true && !process.env.CI);
  }

  /** The transient status line (terminal only). */
  update(line: string): void {
    if (!this.tty) return;
    const cols = this.stream.columns;
    const width = cols && cols > 20 ? cols - 1 : 100; // a pseudo-terminal may report 0 columns
    const text = line.length > width ? `${line.slice(0, width - 1)}…` : line;
    this.shown = text;
    if (this.atLineStart) this.stream.write(`\r\u001b[2K${text}`);
  }

  /** A permanent line, written above the status line on a terminal and as is elsewhere. */
  note(line: string): void {
    this.clear();
    this.stream.write(`${line}\n`);
    this.redraw();
  }

  /** Removes the status line (before other output goes to the same terminal). */
  clear(): void {
    if (this.tty && this.shown && this.atLineStart) this.stream.write('\r\u001b[2K');
  }

  redraw(): void {
    if (this.tty && this.shown && this.atLineStart) this.stream.write(`\r\u001b[2K${this.shown}`);
  }

  /** Tells the progress line whether the terminal's cursor is at the start of a line (it is not drawn mid-line). */
  setLineStart(atStart: boolean): void {
    this.atLineStart = atStart;
  }

  done(): void {
    this.clear();
    this.shown = '';
  }
}

/**
 * Wakes a waiter when any of `dirs` changes (fs.watch), or after `maxMs` (the slow poll behind the watch: a dead
 * process writes nothing, and some file systems deliver no events). A change seen between waits is not lost.
 */
export class DirActivity {
  private watchers: fs.FSWatcher[] = [];
  private dirty = false;
  private wake: (() => void) | null = null;
  constructor(dirs: string[]) {
    for (const d of dirs) {
      try {
        const w = fs.watch(d, () => { this.dirty = true; this.wake?.(); });
        w.on('error', () => {});
        this.watchers.push(w);
      } catch { /* the poll covers it */ }
    }
  }

  /** Resolves true on a change, false on the poll timeout. */
  wait(maxMs: number): Promise<boolean> {
    if (this.dirty) { this.dirty = false; return Promise.resolve(true); }
    return new Promise((resolve) => {
      const t = setTimeout(() => { this.wake = null; resolve(false); }, maxMs);
      this.wake = () => { clearTimeout(t); this.wake = null; this.dirty = false; resolve(true); };
    });
  }

  close(): void {
    for (const w of this.watchers) w.close();
    this.watchers = [];
    this.wake?.();
  }
}
