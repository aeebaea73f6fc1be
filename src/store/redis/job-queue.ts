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
  private readonly queue: Queue;
  private readonly connection;

  constructor(url: string, pool: string) {
    // BullMQ's own connection: it needs its offline queue for its start-up commands; our calls are bounded anyway.
    this.connection = connect(url, { blocking: true, name: 'subagents-server' });
    this.queue = new Queue(queueName(pool), { connection: this.connection });
    this.queue.on('error', () => {}); // reported by the failing call as BUSY
  }

  async add(job: LaunchJob): Promise<void> {
    // A job is kept until its run has ended (so a stalled one is seen failed); BullMQ's lists are trimmed after that.
    await bounded('queue the run', () => this.queue.add('run', job, {
      jobId: job.runId, attempts: 1, removeOnComplete: { count: 1000 }, removeOnFail: { count: 1000 },
    }));
  }

  /** Removes the run's job unless a worker holds it (then it is `taken`: the worker must be asked to cancel). */
  async remove(runId: string): Promise<RemoveOutcome> {
    return bounded('remove the queued run', async () => {
      const job = await this.queue.getJob(runId);
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
    return bounded('read the job', async () => {
      const job = await this.queue.getJob(runId);
      if (!job) return null;
      const stalled = Boolean(job.deferredFailure) || (job.stalledCounter ?? 0) > 0;
      return { state: await job.getState(), failedReason: job.failedReason ?? job.deferredFailure ?? null, stalled };
    });
  }

  async close(): Promise<void> {
    await this.queue.close().catch(() => {});
    this.connection.disconnect();
  }
}
