import { cancelRun } from '../manager/cancel.js';
import type { ManagerContext } from '../manager/context.js';
import { dismissRun } from '../manager/dismiss.js';
import { freshStatus } from '../manager/run-status.js';
import { isTerminalRun, type RunState } from '../store/run-types.js';
import { CliError } from './context.js';
import { formatDuration } from '../format.js';
import { Progress } from './progress.js';
import { peopleCommand } from '../invocation.js';

/**
 * Stops a run and its whole tree through the manager's own cancel (the runner is asked first, then stopped from here
 * if it does not answer). Succeeds when the run is terminal afterwards, whatever state it ended in.
 */
export async function cancelCommand(ctx: ManagerContext, runId: string, out: (s: string) => void): Promise<number> {
  const before = await freshStatus(ctx, runId);
  if (isTerminalRun(before.state)) {
    out(`run ${runId} had already ended: ${before.state}`);
    return 0;
  }
  const progress = new Progress(process.stderr);
  progress.update(`cancelling ${runId} …`);
  const r = await cancelRun(ctx, runId, (ms) => progress.update(`cancelling ${runId} … ${formatDuration(ms)} (waiting for its processes to exit)`));
  progress.done();
  if (r.survivors.length) {
    throw new CliError(`run ${runId} is ${r.state}, but ${r.survivors.length} process(es) could not be killed: pid ${r.survivors.join(', ')}; their slots stay held until they are gone.`);
  }
  if (!isTerminalRun(r.state as RunState)) throw new CliError(`run ${runId} is still ${r.state}; it did not stop within its grace period. Retry, or see ${peopleCommand(`show ${runId}`)}.`);
  out(r.state === 'cancelled' ? `run ${runId} cancelled` : `run ${runId} ended before the cancel took effect: ${r.state}`);
  return 0;
}

/** Hides a run from listings; an active run needs `--cancel` (the manager's RUN_ACTIVE rule). */
export async function dismissCommand(ctx: ManagerContext, runId: string, o: { cancel?: boolean }, out: (s: string) => void): Promise<number> {
  const already = ctx.store.isDismissed(runId);
  try {
    const r = await dismissRun(ctx, runId, o.cancel === true);
    out(`run ${runId} ${already ? 'was already dismissed' : 'dismissed'} (${r.cancelled ? 'cancelled first, ' : ''}${r.state}); it stays readable with show, and gc removes it once past retention`);
    return 0;
  } catch (e) {
    const err = e as { code?: string; message: string };
    if (err.code === 'RUN_ACTIVE') throw new CliError(`run ${runId} is still active; dismiss --cancel stops it first, or wait for it to end.`);
    throw e;
  }
}
