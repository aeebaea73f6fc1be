import { isTerminalRun } from '../store/run-types.js';
import type { ManagerContext } from './context.js';
import { releaseStaleRoots } from './capacity.js';
import { reconcileRun } from './reconcile.js';
import { serveQueue } from './queue.js';

/** How often a live server reconciles every run of the state home (docs/contract.md, "Run states"). */
export const SWEEP_INTERVAL_MS = 30_000;
/**
 * The longest stretch of the sweep's reading between two turns of the event loop. A new server's first sweep reads
 * every run's status once (10 000 runs of other sessions: ~0.4 s here), and read in one go it held every tool call
 * of that moment for as long.
 */
export const SWEEP_SLICE_MS = 5;

const nextTurn = () => new Promise<void>((resolve) => setImmediate(resolve));

/**
 * Reconciles every non-terminal run of the state home, whoever owns it: a runner that died while no client was
 * looking must not hold its capacity slot until someone lists its run. Terminal is final, so runs seen terminal
 * once are never read again by this process.
 */
export class Sweeper {
  private readonly terminal = new Set<string>();
  private running = false;

  constructor(private readonly ctx: ManagerContext, private readonly sliceMs = SWEEP_SLICE_MS) {}

  async sweepOnce(): Promise<number> {
    if (this.running) return 0;
    this.running = true;
    let reconciled = 0;
    try {
      let sliceStart = performance.now();
      for (const runId of this.ctx.store.listRunIds()) {
        if (this.terminal.has(runId)) continue;
        if (performance.now() - sliceStart >= this.sliceMs) {
          await nextTurn();
          sliceStart = performance.now();
        }
        let state: string | null = null;
        try { state = this.ctx.store.readStatus(runId)?.state ?? null; } catch { continue; }
        if (state === null) continue;
        if (isTerminalRun(state as never)) { this.terminal.add(runId); continue; }
        await reconcileRun(this.ctx, runId);
        try {
          const after = this.ctx.store.readStatus(runId)?.state;
          if (after && isTerminalRun(after)) { this.terminal.add(runId); reconciled++; }
        } catch { /* damaged: reported by status, skipped here */ }
      }
      await releaseStaleRoots(this.ctx);
      // Slots that reconciliation returned, and any a dead hand-off left, go to the queue's head.
      await serveQueue(this.ctx);
    } finally {
      this.running = false;
    }
    return reconciled;
  }

  start(): () => void {
    const timer = setInterval(() => { void this.sweepOnce().catch(() => {}); }, SWEEP_INTERVAL_MS);
    timer.unref();
    return () => clearInterval(timer);
  }
}
