/**
 * A pool's BullMQ queue as the servers use it: a launch adds its run as a job (its id is the run id, so it is added
 * once), a cancel removes a job no worker has taken. Workers take jobs in src/worker/.
 */
import { Queue } from 'bullmq';
import type { LaunchJob } from './job.js';
import { bounded, connect } from './connection.js';
import { queueName } from './keys.js';

export type RemoveOutcome = 'removed' | 'taken' | 'absent';

export class JobQueue {
  /** The BullMQ queue and its connection; null until first used, and again after a call failed (made anew then). */
  private open: { queue: Queue; connection: ReturnType<typeof connect> } | null = null;

  constructor(private readonly url: string, private readonly pool: string) {}

  /**
   * Runs `op` on the queue within the call bound. A failed call drops the queue and its connection, and the next call
   * makes them anew: a BullMQ queue whose first connection failed (a server started before its Redis was up) stays
   * failed for good ("not connected" at every later call) even once Redis answers.
   */
  private async use<T>(what: string, op: (queue: Queue) => Promise<T>): Promise<T> {
    if (!this.open) {
      // BullMQ's own connection: it needs its offline queue for its start-up commands; our calls are bounded anyway.
      const connection = connect(this.url, { blocking: true, name: 'subagents-server' });
      const queue = new Queue(queueName(this.pool), { connection });
      queue.on('error', () => {}); // reported by the failing call as BUSY
      this.open = { queue, connection };
    }
    const current = this.open;
    try {
      return await bounded(what, () => op(current.queue));
    } catch (e) {
      if (this.open === current) {
        this.open = null;
        void current.queue.close().catch(() => {});
        current.connection.disconnect();
      }
      throw e;
    }
  }

  async add(job: LaunchJob): Promise<void> {
    // A job is kept until its run has ended (so a stalled one is seen failed); BullMQ's lists are trimmed after that.
    await this.use('queue the run', (queue) => queue.add('run', job, {
      jobId: job.runId, attempts: 1, removeOnComplete: { count: 1000 }, removeOnFail: { count: 1000 },
    }).then(() => {}));
  }

  /** Removes the run's job unless a worker holds it (then it is `taken`: the worker must be asked to cancel). */
  async remove(runId: string): Promise<RemoveOutcome> {
    return this.use('remove the queued run', async (queue) => {
      const job = await queue.getJob(runId);
      if (!job) return 'absent';
      try {
        await job.remove();
        return 'removed';
      } catch {
        return 'taken'; // locked by a worker
      }
    });
  }

  /**
   * BullMQ's state of the run's job, or null when there is none. `stalled`: its worker stopped holding it. BullMQ
   * moves such a job back to the wait list marked to fail (`maxStalledCount: 0`), and fails it only when a worker
   * next takes it, which a pool whose every place is busy may not do for long: the mark is what counts.
   */
  async state(runId: string): Promise<{ state: string; failedReason: string | null; stalled: boolean } | null> {
    return this.use('read the job', async (queue) => {
      const job = await queue.getJob(runId);
      if (!job) return null;
      const stalled = Boolean(job.deferredFailure) || (job.stalledCounter ?? 0) > 0;
      return { state: await job.getState(), failedReason: job.failedReason ?? job.deferredFailure ?? null, stalled };
    });
  }

  async close(): Promise<void> {
    const current = this.open;
    this.open = null;
    if (!current) return;
    await current.queue.close().catch(() => {});
    current.connection.disconnect();
  }
}
