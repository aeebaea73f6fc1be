/**
 * Work that starts after a delay unless it is settled first: `settle()` drops it if it has not started and waits
 * for it if it has. For writes that only matter while something is still going on a moment later.
 */
export class DelayedTask {
  private timer: NodeJS.Timeout | null = null;
  private started: Promise<unknown> | null = null;

  constructor(private readonly delayMs: number) {}

  /** Starts `fn` after the delay (once; a later call replaces a task that has not started). */
  schedule(fn: () => Promise<unknown>): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.started = fn().catch(() => {});
    }, this.delayMs);
  }

  async settle(): Promise<void> {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    await this.started;
  }
}
