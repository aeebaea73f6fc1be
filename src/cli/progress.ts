
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
