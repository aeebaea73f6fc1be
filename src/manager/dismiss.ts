import { SubagentError } from '../errors.js';
import { isTerminalRun } from '../store/run-types.js';
import { cancelRun } from './cancel.js';
import type { ManagerContext } from './context.js';
import { requireVisible } from './listing.js';
import { freshStatus } from './run-status.js';

export interface DismissResult { runId: string; state: string; dismissed: true; cancelled: boolean }

/** Hides a run from listings (it stays readable by id). Never frees capacity by itself: an active run needs cancel. */
export async function dismissRun(ctx: ManagerContext, runId: string, cancel: boolean): Promise<DismissResult> {
  if (ctx.distributed) return ctx.distributed.dismiss(ctx, runId, cancel);
  requireVisible(ctx, runId);
  let s = await freshStatus(ctx, runId);
  let didCancel = false;
  if (!isTerminalRun(s.state)) {
    if (!cancel) {
      throw new SubagentError('RUN_ACTIVE', `run ${runId} is ${s.state}; dismiss it with cancel: true to cancel it first, or wait for it to end.`);
    }
    const c = await cancelRun(ctx, runId);
    didCancel = true;
    s = await freshStatus(ctx, runId);
    if (!isTerminalRun(s.state)) {
      throw new SubagentError('RUN_ACTIVE', `run ${runId} could not be stopped yet (${c.survivors.length} processes survive); it stays listed until it ends.`);
    }
  }
  if (!ctx.store.isDismissed(runId)) ctx.store.markDismissed(runId, ctx.sessionId);
  return { runId, state: s.state, dismissed: true, cancelled: didCancel };
}
