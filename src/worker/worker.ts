/**
 * `subagents-mcp worker` (docs/scale-out.md, "Workers"): takes runs from its pool's BullMQ queue and runs each with the
 * local runner on this machine, in the worker's own state home, mirroring it into Redis. BullMQ holds each job's lock
 * while its run lives; `maxStalledCount: 0` makes a job whose worker died fail instead of running again, and the run
 * ends failed/RUNNER_LOST. SIGTERM drains: no new jobs, running ones finish within the drain timeout, the rest are
 * cancelled.
 */
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { DelayedError, Worker, type Job } from 'bullmq';
import { redactRedisUrl, type Settings } from '../config.js';
import { isSubagentError, SubagentError } from '../errors.js';
import { isRunId } from '../ids.js';
import { cancelRun } from '../manager/cancel.js';
import { launch, type ChainEntryInput, type LaunchInput } from '../manager/launch.js';
import { appendStep, type SharedFanout } from '../manager/append.js';
import { startWarmPool } from '../manager/warm-pool.js';
import { connect } from '../store/redis/connection.js';
import type { LaunchJob } from '../store/redis/job.js';
import { channels, queueName } from '../store/redis/keys.js';
import { RedisRuns } from '../store/redis/run-store.js';
import { isTerminalRun } from '../store/run-types.js';
import { endedStatus } from '../manager/distributed/view.js';
import { endChildren, parseCancelMessage, type TreeCancelReason } from '../manager/distributed/tree.js';
import { JobQueue } from '../store/redis/job-queue.js';
import { awaitRedis } from './await-redis.js';
import { localContext, workerHome } from './local-context.js';
import { mirrorRun } from './mirror.js';
import { deleteRunBranches, removeRunLeftovers, sweepHome } from './leftovers.js';

export interface WorkerOptions {
  concurrency: number;
  roots: string[];
  home: string | null;
  drainTimeoutMs: number;
}

/** Steps' output kept in Redis per step when SUBAGENTS_MAX_OUTPUT_BYTES is not set (docs/scale-out.md). */
const DEFAULT_REDIS_OUTPUT_BYTES = 16 * 1024 * 1024;
/** Beyond the kill grace, how long a run's end waits for its nested runs on other workers to end. */
const CHILDREN_END_MARGIN_MS = 10_000;
/** How long a job waits before it is offered again when its run has no slot yet. */
const RETRY_START_MS = 250;
/** On SIGTERM: how long BullMQ's close may take once no job is processed any more. */
const CLOSE_MS = 5000;
/** On SIGTERM past the drain timeout: how long cancelled runs may take to report their end, past the kill grace. */
const CANCEL_REPORT_MS = 15_000;

interface Held { local: string | null; cancelled: boolean; reason: TreeCancelReason }

const inside = (p: string, root: string) => p === root || p.startsWith(root.endsWith(path.sep) ? root : root + path.sep);

export async function runWorker(settings: Settings, o: WorkerOptions, log: (line: string) => void): Promise<number> {
  const url = settings.redisUrl!;
  const id = `w-${randomBytes(6).toString('base64url')}`;
  const host = os.hostname();
  const home = workerHome(o.home);
  const roots = o.roots.map((r) => path.resolve(r));
  const local = localContext(settings, home, roots, log);
  const capBytes = settings.sources.maxOutputBytes === 'default' ? DEFAULT_REDIS_OUTPUT_BYTES : settings.maxOutputBytes;
  const runs = new RedisRuns(connect(url, { name: 'subagents-worker' }));
  if (!(await awaitRedis(runs.redis, redactRedisUrl(url), log))) {
    runs.redis.disconnect();
    return 1;
  }
  // Pre-booted runners take each job's run as they do a local server's launch (docs/architecture.md, "Warm runners").
  const stopWarmPool = startWarmPool(local);
  // Removes the jobs of nested runs no worker has taken yet when their parent ends (../manager/distributed/tree.ts).
  const queue = new JobQueue(url, settings.pool);
  const sub = connect(url, { blocking: true, name: 'subagents-worker-cancel' });
  const held = new Map<string, Held>();
  const me = { id, host };

  const cancelLocal = (runId: string, reason: TreeCancelReason = 'CANCELLED') => {
    const h = held.get(runId);
    if (!h) return;
    if (!h.cancelled) h.reason = reason;
    h.cancelled = true;
    if (h.local) void cancelRun(local, h.local, undefined, h.reason).catch((e) => log(`cancel of ${runId} failed: ${(e as Error).message}`));
  };
  // An append for a run this worker holds: its local runner takes it; the answer goes back on the request's channel.
  const appendLocal = async (text: string) => {
    let req: { runId: string; requestId: string; entry: ChainEntryInput };
    try { req = JSON.parse(text) as typeof req; } catch { return; }
    const h = held.get(req.runId);
    if (!h) return; // another worker's run
    let reply: unknown;
    if (!h.local) reply = { ok: false, code: 'BUSY', message: `run ${req.runId} is still starting on worker ${host}; retry in a moment.` };
    else {
      try {
        // The tree's fan-out is claimed in Redis, where its launches and nested runs on other machines claim too
        // (docs/scale-out.md, "Capacity across machines"); this worker's ledger sees only its own part of the tree.
        const run = await runs.read(req.runId);
        if (!run) throw new SubagentError('RUN_NOT_FOUND', `run ${req.runId} is not in Redis any more; launch a new run with the step instead.`);
        const root = run.record.rootRunId ?? run.record.runId;
        const shared: SharedFanout = {
          limit: run.record.limits.maxSpawns,
          claim: (n) => runs.claimAppend(root, n, run.record.limits.maxSpawns),
          release: (n) => runs.returnFanout(root, n),
        };
        const result = await appendStep(local, h.local, req.entry, shared);
        reply = { ok: true, result };
        // Status shows it pending until its step starts.
        await runs.recordAppend(req.runId).catch(() => {});
      } catch (e) {
        reply = isSubagentError(e) ? { ok: false, code: e.code, message: e.message.split(h.local).join(req.runId) } : { ok: false, code: 'INTERNAL', message: 'the worker could not record the append' };
      }
    }
    await runs.redis.publish(channels.reply(req.requestId), JSON.stringify(reply)).catch(() => {});
  };
  // A dismissed run's worktrees left on this machine (a run id; the other workers of the pool have none of it).
  // `gc --branches` sends { runId, branches: true }: the branches this machine's checkout holds for it go too.
  const cleanupLocal = (message: string) => {
    let runId = message;
    let branches = false;
    if (message.startsWith('{')) {
      try { ({ runId, branches } = JSON.parse(message) as { runId: string; branches: boolean }); } catch { return; }
    }
    if (typeof runId !== 'string' || !isRunId(runId) || held.has(runId)) return;
    void (async () => {
      const n = await removeRunLeftovers(local, runId);
      if (n) log(`removed ${n} worktree(s) left by run ${runId}`);
      const b = branches === true ? await deleteRunBranches(local, runId) : 0;
      if (b) log(`deleted ${b} branch(es) of run ${runId}`);
    })().catch((e) => log(`cleanup of ${runId} failed: ${(e as Error).message}`));
  };
  const cancelChannel = channels.cancel(settings.pool);
  const cleanupChannel = channels.cleanup(settings.pool);
  sub.on('message', (channel: string, message: string) => {
    if (channel === cancelChannel) { const m = parseCancelMessage(message); cancelLocal(m.runId, m.reason); }
    else if (channel === cleanupChannel) cleanupLocal(message);
    else void appendLocal(message);
  });
  await sub.subscribe(cancelChannel, channels.append(settings.pool), cleanupChannel);
  // Runs a previous life of this worker left in its home (killed with its machine): stopped, their worktrees removed.
  const swept = await sweepHome(local).catch(() => 0);
  if (swept) log(`removed ${swept} worktree(s) left in ${home} by runs that ended`);

  const fail = async (runId: string, message: string) => {
    const run = await runs.read(runId);
    if (run) await runs.endRun(endedStatus(run.status, 'failed', { code: 'HANDSHAKE_FAILED', message }));
  };

  const execute = async (job: LaunchJob): Promise<string> => {
    const input = job.input as unknown as LaunchInput;
    const cwd = String(input.cwd ?? '');
    if (!roots.some((r) => inside(cwd, r))) {
      await fail(job.runId, `worker ${host} (${id}) does not serve ${cwd.slice(0, 200)}: its roots are ${roots.join(', ') || '(none)'}; start a worker with --root covering it in pool ${settings.pool}.`);
      return 'refused';
    }
    const h: Held = { local: null, cancelled: false, reason: 'CANCELLED' };
    held.set(job.runId, h);
    let linkFile: string | null = null;
    try {
      let started;
      try {
        // The run's runner hands this Redis to its agents' nested servers through their steps' 0600 budget files
        // (docs/scale-out.md, "Nested delegation"); it is in no environment. The tree's budgets are its server's.
        started = await launch(local, input, { signal: new AbortController().signal, runId: job.runId, distributedLink: { url, pool: settings.pool, runId: job.runId }, ...(job.treeLimits ? { treeLimits: job.treeLimits } : {}) });
      } catch (e) {
        const why = isSubagentError(e) ? e.text : 'the local launch failed';
        await fail(job.runId, `on worker ${host} (${id}): ${why.slice(0, 400)}`);
        return 'refused';
      }
      h.local = started.runId;
      linkFile = local.store.paths(started.runId).distributedLink;
      await runs.event(job.runId, { type: 'started', worker: id, host }).catch(() => {});
      if (h.cancelled) cancelLocal(job.runId, h.reason);
      const end = await mirrorRun({
        runs, local, runId: job.runId, localRunId: started.runId, worker: me, capBytes,
        onEndedElsewhere: () => { if (!h.cancelled) cancelLocal(job.runId); },
        // Nested runs end with the step that launched them, and the run's end waits for them (docs/scale-out.md).
        endChildren: (o) => endChildren(runs, queue, job.runId, { ...o, maxMs: o.wait ? settings.killGraceMs + CHILDREN_END_MARGIN_MS : 0 }),
      });
      return end.state;
    } finally {
      held.delete(job.runId);
      if (linkFile) fs.rmSync(linkFile, { force: true });
    }
  };

  const jobsConnection = connect(url, { blocking: true, name: 'subagents-worker-jobs' });
  // Jobs being processed (from their start check to their run's end): what a drain waits for.
  let processing = 0;
  const worker = new Worker(queueName(settings.pool), async (job: Job, token?: string) => {
    processing++;
    try {
      const data = job.data as LaunchJob;
      const go = await runs.startRun(data.runId, data.limit, data.agentSlots, data.maxAgents, data.nested === true);
      if (go === -1) return 'ended';
      if (go === 0) {
        // No slot yet (or not this run's turn): offered again shortly, to this worker or another.
        await job.moveToDelayed(Date.now() + RETRY_START_MS, token);
        throw new DelayedError();
      }
      return await execute(data);
    } finally {
      processing--;
    }
  }, {
    connection: jobsConnection,
    concurrency: o.concurrency,
    maxStalledCount: 0,
    stalledInterval: settings.stallIntervalMs,
    lockDuration: settings.stallIntervalMs,
  });
  // A job this worker's stall check failed: its worker died. The run ends RUNNER_LOST (servers do the same on their
  // next look, whichever comes first; the end is a compare-and-set).
  const lost = (runId: string) => {
    void (async () => {
      const run = await runs.read(runId);
      if (!run || isTerminalRun(run.status.state)) return;
      await runs.endRun(endedStatus(run.status, 'failed', { code: 'RUNNER_LOST', message: `worker ${run.host ?? '?'} (${run.worker ?? '?'}) stopped holding the run; it is never run again.` }));
      await endChildren(runs, queue, run.record.runId, { reason: 'PARENT_ENDED', maxMs: 0 });
    })().catch(() => {});
  };
  worker.on('failed', (job, err) => { if (job && /stalled/i.test(err?.message ?? '')) lost(job.id!); });
  // BullMQ moves a stalled job back to the wait list marked to fail, and fails it only when a worker takes it again:
  // with every place of the pool busy that may be long, so the run ends at the stall check itself.
  worker.on('stalled', (jobId) => { if (!held.has(jobId)) lost(jobId); });
  worker.on('error', (e) => log(`queue error: ${(e as Error).message.replace(url, redactRedisUrl(url))}`));

  const beat = () => runs.heartbeat({ id, host, pid: process.pid, pool: settings.pool, concurrency: o.concurrency, running: held.size, at: Date.now() }).catch(() => {});
  void beat();
  const beating = setInterval(beat, Math.max(1000, Math.floor(settings.stallIntervalMs / 2)));
  log(`worker ${id} on ${host}: pool ${settings.pool}, concurrency ${o.concurrency}, roots ${roots.join(', ') || '(none)'}, home ${home}, Redis ${redactRedisUrl(url)}`);

  return new Promise<number>((resolve) => {
    let stopping = false;
    const stop = async (signal: string) => {
      if (stopping) return;
      stopping = true;
      log(`${signal}: draining (no new runs; ${held.size} running, ${o.drainTimeoutMs} ms to finish)`);
      const closing = worker.close().then(() => true, () => true);
      // Drained once no job is processed any more: BullMQ's close is not what is waited for, since after a Redis
      // restart its blocking connection may never settle (the close would then hang with nothing left to run).
      const idle = async (maxMs: number): Promise<boolean> => {
        const end = Date.now() + maxMs;
        while (processing > 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
        return processing === 0;
      };
      if (!(await idle(o.drainTimeoutMs))) {
        for (const runId of held.keys()) cancelLocal(runId);
        // The cancelled runs' ends reach Redis (their agents get the kill grace first).
        await idle(settings.killGraceMs + CANCEL_REPORT_MS);
      }
      if (!(await Promise.race([closing, new Promise<boolean>((r) => setTimeout(() => r(false), CLOSE_MS))]))) {
        log(`the queue's connections did not close within ${CLOSE_MS} ms; leaving them`);
      }
      clearInterval(beating);
      stopWarmPool();
      await runs.forgetWorker(id).catch(() => {});
      sub.disconnect();
      jobsConnection.disconnect();
      // Bounded as the worker's close is: a Queue's close waits on its connection, which Redis may not answer.
      await Promise.race([queue.close(), new Promise((r) => setTimeout(r, CLOSE_MS))]);
      runs.redis.disconnect();
      log('stopped');
      resolve(0);
    };
    process.on('SIGTERM', () => void stop('SIGTERM'));
    process.on('SIGINT', () => void stop('SIGINT'));
  });
}
