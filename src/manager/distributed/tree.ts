/**
 * The nested runs of a distributed run (docs/scale-out.md, "Nested delegation"), ended as local mode ends them
 * (docs/contract.md, "Nesting and isolation"): when the step that launched them ends, or their parent run does, those
 * still active are cancelled — `PARENT_ENDED`, or `CANCELLED` when the cancel of their parent's tree is the cause.
 * A nested run no worker holds is removed from the queue and ended here; one a worker holds is asked on its pool's
 * cancel channel, and that worker stops it and, in turn, its own nested runs.
 */
import { channels } from '../../store/redis/keys.js';
import type { JobQueue } from '../../store/redis/job-queue.js';
import type { RedisRuns } from '../../store/redis/run-store.js';
import { isTerminalRun } from '../../store/run-types.js';
import { endedStatus } from './view.js';

export type TreeCancelReason = 'CANCELLED' | 'PARENT_ENDED';

/** The message a worker reads on `sa:cancel:<pool>`: the run id, then the reason when it is not a plain cancel. */
export function cancelMessage(runId: string, reason: TreeCancelReason): string {
  return reason === 'CANCELLED' ? runId : `${runId} ${reason}`;
}

export function parseCancelMessage(message: string): { runId: string; reason: TreeCancelReason } {
  const [runId = '', reason] = message.split(' ');
  return { runId, reason: reason === 'PARENT_ENDED' ? 'PARENT_ENDED' : 'CANCELLED' };
}

const MESSAGES: Record<TreeCancelReason, string> = {
  PARENT_ENDED: 'the agent that launched this run ended before a worker started it; nothing was started',
  CANCELLED: 'its run tree was cancelled before a worker started it; nothing was started',
};

/**
 * Asks each active nested run of `parentRunId` (those of `stepKey` only, when given) to end with `reason`; with
 * `deep`, their own nested runs too, at once (a cancel of a tree reaches all of it in one grace). Returns the ids asked.
 */
export async function askChildrenToEnd(runs: RedisRuns, queue: JobQueue, parentRunId: string, o: { reason: TreeCancelReason; stepKey?: string; deep?: boolean }): Promise<string[]> {
  const asked: string[] = [];
  const frontier = (await runs.children(parentRunId)).filter((c) => o.stepKey === undefined || c.stepKey === o.stepKey).map((c) => c.runId);
  const seen = new Set<string>();
  while (frontier.length > 0 && seen.size < 10_000) {
    const id = frontier.shift()!;
    if (seen.has(id)) continue;
    seen.add(id);
    if (o.deep) frontier.push(...(await runs.children(id)).map((c) => c.runId));
    const run = await runs.read(id);
    if (!run || isTerminalRun(run.status.state)) continue;
    asked.push(id);
    if (run.worker === null && await queue.remove(id) !== 'taken') {
      await runs.endRun(endedStatus(run.status, 'cancelled', { code: o.reason, message: MESSAGES[o.reason] }));
      continue;
    }
    await runs.call('send the cancel', () => runs.redis.publish(channels.cancel(run.record.pool), cancelMessage(id, o.reason)));
  }
  return asked;
}

/**
 * `askChildrenToEnd`, then waits until every run asked has ended, within `maxMs` (a nested run on a worker that died
 * ends RUNNER_LOST at its pool's next stall check, which may come later: the wait is bounded, the asks are not lost).
 */
export async function endChildren(runs: RedisRuns, queue: JobQueue, parentRunId: string, o: { reason: TreeCancelReason; stepKey?: string; maxMs: number }): Promise<number> {
  const waiting = await askChildrenToEnd(runs, queue, parentRunId, o);
  const asked = waiting.length;
  const end = performance.now() + o.maxMs;
  let round = 0;
  while (waiting.length > 0 && performance.now() < end) {
    await new Promise((r) => setTimeout(r, 200));
    for (const id of [...waiting]) {
      const state = await runs.readState(id).catch(() => 'unknown');
      if (state === null || (state !== 'unknown' && isTerminalRun(state as 'completed'))) waiting.splice(waiting.indexOf(id), 1);
    }
    // Asked again now and then: a cancel published while the holder was between subscriptions is not lost for good.
    if (++round % 25 === 0) for (const id of waiting) await askAgain(runs, id, o.reason);
  }
  return asked;
}

async function askAgain(runs: RedisRuns, runId: string, reason: TreeCancelReason): Promise<void> {
  const run = await runs.read(runId).catch(() => null);
  if (!run || isTerminalRun(run.status.state)) return;
  await runs.call('send the cancel', () => runs.redis.publish(channels.cancel(run.record.pool), cancelMessage(runId, reason))).catch(() => {});
}
