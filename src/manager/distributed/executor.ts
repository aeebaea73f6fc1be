/**
 * Distributed mode's launch, status and cancel (docs/scale-out.md): a launch is accepted in Redis (one script:
 * fan-out, an active-run slot or a queue place, record and first status) and added to its pool's BullMQ queue; a
 * worker takes it and runs it with the local runner on its machine, mirroring the run into Redis; `status` reads Redis
 * and waits on the run's channel; `cancel` removes a job no worker holds, else asks the holding worker.
 */
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { resolveBin } from '../../agents/resolve-bin.js';
import { SubagentError, type ErrorCode } from '../../errors.js';
import { newRunId } from '../../ids.js';
import { ensurePrivateDir, writeFileAtomic } from '../../store/atomic-write.js';
import { connect } from '../../store/redis/connection.js';
import { channels } from '../../store/redis/keys.js';
import { JobQueue } from '../../store/redis/job-queue.js';
import type { LaunchJob } from '../../store/redis/job.js';
import { RunNotifications } from '../../store/redis/notifications.js';
import { RedisRuns, type DistributedRecord, type StoredRun } from '../../store/redis/run-store.js';
import { isTerminalRun, type RunStatus, type StepSpec, type StepStatus } from '../../store/run-types.js';
import { newStepStatus } from '../../store/step-status.js';
import { redactRedisUrl, type Settings } from '../../config.js';
import type { CancelResult } from '../cancel.js';
import type { AppendResult } from '../append.js';
import type { DismissResult } from '../dismiss.js';
import type { RestoreResult } from '../sessions.js';
import type { DistributedHealth, DistributedRuns, FeedSince, ManagerContext } from '../context.js';
import { FEED_START, feedIdBefore, followFeed, isFeedId, type FeedEntry } from '../../store/redis/feed.js';
import { DEFAULT_CONCURRENCY, type ChainEntryInput, type LaunchInput, type LaunchResult } from '../launch.js';
import { notFound } from '../listing.js';
import type { StatusAnswer, StatusQuery, WaitInfo } from '../run-status.js';
import type { RunSummary } from '../status-view.js';
import { endedStatus, renderDistributedRun } from './view.js';
import { askChildrenToEnd } from './tree.js';
import { checkNesting } from '../nesting.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
/** How long a launch answered BUSY is watched for its claim reaching Redis late (`voidLateClaim`). */
const LATE_CLAIM_WATCH_MS = 10 * 60_000;

/** Agents each entry starts (its fan-out claim) and the most at once (the run's agent slots). */
function shapeOf(entries: ChainEntryInput[]): { claims: number; width: number; agents: string[] } {
  let claims = 0;
  let width = 1;
  const agents: string[] = [];
  for (const e of entries) {
    if ('parallel' in e) {
      claims += e.parallel.length;
      width = Math.max(width, Math.min(e.concurrency ?? DEFAULT_CONCURRENCY, e.parallel.length));
      agents.push(...e.parallel.map((m) => m.agent));
    } else {
      claims += 1;
      agents.push(e.agent);
    }
  }
  return { claims, width, agents };
}

/** The agent starts of a launch's entries, named as local mode names them (src/manager/launch.ts claimPaths). */
function claimPathsOf(entries: ChainEntryInput[]): string[] {
  return entries.flatMap((e, i) => ('parallel' in e ? e.parallel.map((m, j) => `step ${i} member ${j} (${m.agent})`) : [`step ${i} (${e.agent})`]));
}

/** A nested run's marker in its parent's local run directory (src/store/layout.ts, remoteChildrenDir). */
function markRemoteChild(ctx: ManagerContext, localParentRunId: string, childRunId: string, stepKey: string): void {
  try {
    const paths = ctx.store.paths(localParentRunId);
    ensurePrivateDir(paths.remoteChildrenDir);
    writeFileAtomic(paths.remoteChild(childRunId), JSON.stringify({ stepKey }), { durable: false });
  } catch {
    // The run's end still ends it (src/worker/mirror.ts); only its step's end would not wait for it.
  }
}

/** Pending step statuses named after the agents asked for (the worker resolves and freezes them). */
function pendingSteps(entries: ChainEntryInput[]): StepStatus[] {
  return entries.map((e, i) => newStepStatus(i, ('parallel' in e
    ? { kind: 'group', members: e.parallel.map((m) => ({ agent: { name: m.agent } })), concurrency: 1, failFast: false }
    : { kind: 'agent', agent: { name: e.agent } }) as unknown as StepSpec));
}

export class DistributedExecutor implements DistributedRuns {
  readonly runs: RedisRuns;
  private readonly queue: JobQueue;
  private readonly notes: RunNotifications;

  constructor(private readonly settings: Settings & { redisUrl: string }) {
    this.runs = new RedisRuns(connect(settings.redisUrl, { name: 'subagents-server' }));
    this.queue = new JobQueue(settings.redisUrl, settings.pool);
    this.notes = new RunNotifications(settings.redisUrl);
  }

  async launch(ctx: ManagerContext, input: LaunchInput): Promise<LaunchResult> {
    const { settings } = ctx;
    for (const [name, v] of [['timeoutMs', input.timeoutMs], ['queueTimeoutMs', input.queueTimeoutMs]] as const) {
      if (v !== undefined && v > settings.maxTimeoutMs) throw new SubagentError('INVALID_INPUT', `${name} ${v} is above the maximum of ${settings.maxTimeoutMs} ms (SUBAGENTS_MAX_TIMEOUT_MS).`);
    }
    // The worker checks the cwd against its own roots (the machines share paths, not files): here it must only be
    // absolute, or relative to this server's first root.
    const roots = ctx.roots();
    const base = roots[0] ?? settings.cwd;
    const cwd = input.cwd === undefined ? base : path.resolve(base, input.cwd);
    if (roots.length && !roots.some((r) => cwd === r || cwd.startsWith(r.endsWith(path.sep) ? r : r + path.sep))) {
      // Names what was asked, in local mode's words (docs/scale-out.md, "What a run is does not change").
      throw new SubagentError('CWD_NOT_ALLOWED', `cwd ${JSON.stringify(String(input.cwd).slice(0, 200))} resolves outside the allowed roots (${roots.join(', ')}); use a directory inside one, or add it to SUBAGENTS_ROOTS.`);
    }
    await checkIsolation(ctx, cwd, input);
    const entries: ChainEntryInput[] = input.mode === 'single' ? [input.step] : input.mode === 'parallel' ? [input.group] : input.chain;
    if (ctx.nesting) return this.launchNested(ctx, input, entries);
    const { claims, width, agents } = shapeOf(entries);
    const runId = newRunId();
    const createdAt = new Date().toISOString();
    const record: DistributedRecord = {
      v: 1, runId, sessionId: ctx.sessionId, pool: settings.pool, mode: input.mode, cwd, label: input.label ?? null, createdAt,
      agents, limits: { maxSpawns: settings.maxSpawnsPerRun, maxDepth: settings.maxDepth }, claims, agentSlots: width,
      queueDeadline: Date.now() + (input.queueTimeoutMs ?? settings.queueTimeoutMs),
      depth: 0, rootRunId: runId, parentRunId: null, parentStepKey: null, maxAgents: settings.maxAgents,
    };
    const status = (state: 'starting' | 'queued'): RunStatus => ({
      v: 1, runId, state, error: null, startedAt: null, endedAt: null, updatedAt: createdAt, runner: null,
      steps: pendingSteps(entries), appendsTaken: 0, survivors: [],
    });
    const queueAllowed = input.queue !== false && settings.maxActiveRuns > 0;
    const claim = () => this.runs.claimLaunch(record, status('starting'), status('queued'), { limit: settings.maxActiveRuns, queueAllowed, maxQueued: settings.maxQueued }).catch((e: unknown) => {
      void this.voidLateClaim(runId);
      throw e;
    });
    let c = await claim();
    // A full pool may be full of orphans (a server that died between acceptance and queueing, runs past their queue
    // timeout): repaired here, then the launch is tried once more (docs/scale-out.md, "Failures"). A queued launch
    // repairs in the background, so the queue's head can start.
    if (c.outcome === 'FULL' || c.outcome === 'QUEUE_FULL') {
      if (await this.repair().catch(() => 0)) c = await claim();
    } else if (c.outcome === 'QUEUED') {
      void this.repair().catch(() => 0);
    }
    if (c.outcome === 'FANOUT') {
      // Local mode's words (src/manager/capacity.ts): which agent start is the first that does not fit.
      const remaining = settings.maxSpawnsPerRun - c.used;
      const first = claimPathsOf(entries)[Math.max(0, remaining)] ?? `step ${remaining}`;
      throw new SubagentError('FANOUT_EXHAUSTED', `the run tree's fan-out budget has ${remaining} of ${settings.maxSpawnsPerRun} agent starts left and this launch needs ${claims}; ${first} does not fit. Use fewer steps, or let the tree finish.`);
    }
    if (c.outcome === 'FULL' || c.outcome === 'QUEUE_FULL') {
      const why = c.outcome === 'FULL'
        ? `${c.active} of ${settings.maxActiveRuns} active runs are in progress across the pool's servers (SUBAGENTS_MAX_ACTIVE_RUNS)`
        : `the queue holds ${c.queued} launches, its limit (SUBAGENTS_MAX_QUEUED)`;
      throw new SubagentError('CAPACITY_EXHAUSTED', `${why}. Wait with status { waitMs } and retry, or cancel one of your runs.`);
    }
    // Test seam: the server dies between acceptance and queueing (the repair of its orphan is tested so).
    if (ctx.env.SUBAGENTS_TEST_FAULT === 'server-after-accept') process.kill(process.pid, 'SIGKILL');
    const job: LaunchJob = {
      runId, sessionId: ctx.sessionId, input: { ...input, cwd, queue: false }, limit: settings.maxActiveRuns,
      maxAgents: settings.maxAgents, agentSlots: width, treeLimits: record.limits,
    };
    try {
      await this.queue.add(job);
    } catch (e) {
      // Accepted in Redis but never queued: the run ends at once and gives its slot back.
      await this.runs.endRun(endedStatus(status(c.outcome === 'QUEUED' ? 'queued' : 'starting'), 'failed', { code: 'HANDSHAKE_FAILED', message: 'the run could not be queued for a worker; nothing was started' })).catch(() => {});
      throw e;
    }
    const st = status(c.outcome === 'QUEUED' ? 'queued' : 'starting');
    const steps = (input.mode === 'parallel' ? st.steps[0]!.members! : st.steps).map((s) => ({ index: s.index, agent: s.agent, state: s.state }));
    return {
      runId, sessionId: ctx.sessionId, state: st.state, mode: input.mode, steps,
      fanout: { used: claims, limit: settings.maxSpawnsPerRun, remaining: settings.maxSpawnsPerRun - claims },
      capacity: { active: c.active, limit: settings.maxActiveRuns },
      ...(c.outcome === 'QUEUED' ? { queue: { position: c.position, length: c.queued } } : {}),
    };
  }

  /**
   * A launch from a server an agent of a worker's run started (docs/scale-out.md, "Nested delegation"), charged as
   * local mode charges one (docs/contract.md, "Nesting and isolation"): one deeper than its parent, refused
   * DEPTH_EXCEEDED past the tree's limit; to the tree's fan-out and to the agent slots, never to the active-run capacity
   * nor the queue; listed in the parent step's children. The tree's limits are its root server's, read from Redis (this
   * server runs with the agent's environment). Every check and charge is one script, exact across workers.
   */
  private async launchNested(ctx: ManagerContext, input: LaunchInput, entries: ChainEntryInput[]): Promise<LaunchResult> {
    const grant = ctx.nesting!;
    const link = grant.redis;
    const stepEnded = () => new SubagentError('RUN_NOT_ACTIVE', 'the step that started this server has ended; nothing can be launched from it any more.');
    // Its tree lives in its parent's state home, not in this Redis: its launches belong there.
    if (!link) throw new SubagentError('INVALID_INPUT', 'this server was started by an agent of a local run, whose nested runs stay in its state home; start it without --redis or SUBAGENTS_REDIS_URL.');
    // The secret must still be valid now: its step may have ended since this server started.
    if (!checkNesting(ctx.store, grant.parentRunId, grant.secretHash)) throw stepEnded();
    const parent = await this.runs.read(link.runId);
    if (!parent || isTerminalRun(parent.status.state)) throw stepEnded();
    const p = parent.record;
    const rootRunId = p.rootRunId ?? p.runId;
    const depth = (p.depth ?? 0) + 1;
    const limits = p.limits;
    if (depth + 1 > limits.maxDepth) {
      throw new SubagentError('DEPTH_EXCEEDED', `this run tree allows agents to depth ${limits.maxDepth} and a launch from here would start agents at depth ${depth + 1}; do the work in this agent instead of delegating.`);
    }
    const cwd = input.cwd === undefined ? p.cwd : path.resolve(p.cwd, input.cwd);
    const { claims, width, agents } = shapeOf(entries);
    const maxAgents = p.maxAgents ?? this.settings.maxAgents;
    const runId = newRunId();
    const createdAt = new Date().toISOString();
    const record: DistributedRecord = {
      v: 1, runId, sessionId: ctx.sessionId, pool: p.pool, mode: input.mode, cwd, label: input.label ?? null, createdAt,
      agents, limits, claims, agentSlots: width, queueDeadline: Number.MAX_SAFE_INTEGER,
      depth, rootRunId, parentRunId: p.runId, parentStepKey: grant.parentStepKey, maxAgents,
    };
    const status: RunStatus = {
      v: 1, runId, state: 'starting', error: null, startedAt: null, endedAt: null, updatedAt: createdAt, runner: null,
      steps: pendingSteps(entries), appendsTaken: 0, survivors: [],
    };
    // Marked in the parent's local run directory before it is accepted, so its runner, at the step's end, cannot miss
    // it: the step then waits until its worker has ended its nested runs (./tree.ts), as a local step waits.
    markRemoteChild(ctx, grant.parentRunId, runId, grant.parentStepKey);
    const root = rootRunId === p.runId ? parent : await this.runs.read(rootRunId);
    record.rootSessionId = root?.record.sessionId ?? p.rootSessionId ?? p.sessionId;
    const c = await this.runs.claimNested(record, status, record.rootSessionId, { maxAgents });
    if (c.outcome === 'PARENT_ENDED') throw stepEnded();
    if (c.outcome === 'FANOUT') {
      throw new SubagentError('FANOUT_EXHAUSTED', `this launch would start ${claims} agents and the run tree may start ${limits.maxSpawns} in all (SUBAGENTS_MAX_SPAWNS_PER_RUN); ${c.used} are claimed. Do the work in this agent, or launch fewer agents.`);
    }
    if (c.outcome === 'AGENTS') {
      throw new SubagentError('CAPACITY_EXHAUSTED', `${c.agents} of ${maxAgents} agent processes are running or reserved across the pool (SUBAGENTS_MAX_AGENTS) and this launch needs ${width} more; a nested launch is refused rather than queued (a waiting parent could deadlock). Do the work in this agent, launch fewer agents at once, or retry after one of your nested runs ends.`);
    }
    const job: LaunchJob = {
      runId, sessionId: ctx.sessionId, input: { ...input, cwd, queue: false }, limit: 0, maxAgents, agentSlots: width, nested: true,
    };
    try {
      await this.queue.add(job);
    } catch (e) {
      await this.runs.endRun(endedStatus(status, 'failed', { code: 'HANDSHAKE_FAILED', message: 'the run could not be queued for a worker; nothing was started' })).catch(() => {});
      throw e;
    }
    void this.runs.event(runId, { type: 'accepted', pool: p.pool, parentRunId: p.runId, parentStep: grant.parentStepKey }).catch(() => {});
    const steps = (input.mode === 'parallel' ? status.steps[0]!.members! : status.steps).map((s) => ({ index: s.index, agent: s.agent, state: s.state }));
    const counts = await this.runs.counts().catch(() => ({ active: 0 }));
    return {
      runId, sessionId: ctx.sessionId, state: 'starting', mode: input.mode, steps,
      fanout: { used: c.used, limit: limits.maxSpawns, remaining: Math.max(0, limits.maxSpawns - c.used) },
      capacity: { active: counts.active, limit: this.settings.maxActiveRuns },
    };
  }

  /**
   * A launch answered BUSY (Redis did not answer in time) whose claim may still reach Redis: a paused Redis runs the
   * script it already holds once it goes on. The caller was told nothing happened, so a run that appears that way is
   * ended at once (no job was queued for it: nothing runs), returning its slot or queue place. Reads go on the
   * claim's own connection, after it: once one is answered, the claim has either taken effect or never will.
   */
  private async voidLateClaim(runId: string): Promise<void> {
    const until = Date.now() + LATE_CLAIM_WATCH_MS;
    while (Date.now() < until) {
      let run: StoredRun | null;
      try {
        run = await this.runs.read(runId);
      } catch {
        await sleep(1000);
        continue;
      }
      if (run && !isTerminalRun(run.status.state) && run.worker === null) {
        await this.runs.endRun(endedStatus(run.status, 'failed', { code: 'HANDSHAKE_FAILED', message: 'the launch was answered BUSY (Redis did not answer in time) and reached Redis only later; nothing was started' })).catch(() => {});
      }
      return;
    }
  }

  /**
   * Ends the runs that hold a slot or a queue place for nothing: accepted but never queued (their server died in
   * between: no job, no worker, older than the handshake timeout), and queued runs past their queue timeout. Returns
   * how many it ended.
   */
  async repair(): Promise<number> {
    let ended = 0;
    for (const runId of await this.runs.slotHolders()) {
      const run = await this.runs.read(runId);
      if (!run || isTerminalRun(run.status.state) || run.worker !== null) continue;
      const age = Date.now() - Date.parse(run.record.createdAt);
      if (run.status.state === 'queued' && Date.now() > run.record.queueDeadline) {
        if (await this.queue.remove(runId) === 'taken') continue;
        ended += Number(await this.runs.endRun(endedStatus(run.status, 'failed', { code: 'QUEUE_TIMEOUT', message: 'the run waited for a slot past its queue timeout (queueTimeoutMs, SUBAGENTS_QUEUE_TIMEOUT_MS); nothing was started' })));
        continue;
      }
      if (age < this.settings.handshakeTimeoutMs) continue;
      if (await this.queue.state(runId) !== null) continue;
      ended += Number(await this.runs.endRun(endedStatus(run.status, 'failed', { code: 'HANDSHAKE_FAILED', message: 'the server that accepted the run stopped before it was queued for a worker; nothing was started' })));
    }
    return ended;
  }

  /** The run as this session may see it (its own, or adopted through restore), else RUN_NOT_FOUND. */
  private async visible(ctx: ManagerContext, runId: string): Promise<StoredRun> {
    const run = await this.runs.read(runId);
    if (!run) throw notFound(runId);
    // The session's own runs and adopted ones, and the nested runs under them (docs/contract.md, "Nesting and isolation").
    let lineage: Set<string> | null = null;
    let at: StoredRun | null = run;
    for (let hops = 0; at && hops <= 64; hops++) {
      const owner = at.record.sessionId;
      if (ctx.visibleSessions().has(owner) || (lineage ??= await this.runs.lineage(ctx.sessionId)).has(owner)) return run;
      at = at.record.parentRunId ? await this.runs.read(at.record.parentRunId) : null;
    }
    throw notFound(runId);
  }

  /**
   * An appended chain step goes to the worker that holds the run (its runner takes it as in local mode, under the run's
   * lock there); the worker's answer is the answer. A chain no worker has started yet cannot take one: BUSY, retry.
   */
  async append(ctx: ManagerContext, runId: string, entry: ChainEntryInput): Promise<AppendResult> {
    const run = await this.visible(ctx, runId);
    if (run.record.mode !== 'chain') throw new SubagentError('NOT_A_CHAIN', `run ${runId} is a ${run.record.mode} run; only chains take appended steps. Launch a new run instead.`);
    if (isTerminalRun(run.status.state)) throw new SubagentError('RUN_NOT_ACTIVE', `run ${runId} is ${run.status.state}; a chain takes appended steps only while it runs. Launch a new run with this step instead.`);
    if (run.worker === null) throw new SubagentError('BUSY', `run ${runId} is ${run.status.state} and no worker has started it yet; append once status shows it running.`);
    const requestId = randomBytes(12).toString('base64url');
    let answer: ((m: string) => void) | null = null;
    const replied = new Promise<string>((r) => { answer = r; });
    const stop = await this.notes.listen(channels.reply(requestId), (m) => answer?.(m));
    try {
      await this.runs.call('send the append', () => this.runs.redis.publish(channels.append(run.record.pool), JSON.stringify({ runId, requestId, entry })));
      const text = await Promise.race([replied, sleep(ctx.settings.lockWaitMs).then(() => null)]);
      if (text === null) throw new SubagentError('BUSY', `the worker holding run ${runId} (${run.host ?? '?'}) did not answer within ${ctx.settings.lockWaitMs} ms; retry, or check it with status.`);
      const reply = JSON.parse(text) as { ok: true; result: AppendResult } | { ok: false; code: ErrorCode; message: string };
      if (!reply.ok) throw new SubagentError(reply.code, reply.message);
      return { ...reply.result, runId };
    } finally {
      stop();
    }
  }

  /** A visible run's creation time and status (reconciled), for MCP Tasks and subscriptions. */
  async runState(ctx: ManagerContext, runId: string): Promise<{ createdAt: string; status: RunStatus }> {
    const run = await this.reconcile(await this.visible(ctx, runId));
    return { createdAt: run.record.createdAt, status: run.status };
  }

  /** Calls `onChange` at each status change of the run (its channel) until the returned stop is called. */
  watch(runId: string, onChange: () => void): Promise<() => void> {
    return this.notes.watch(runId, onChange);
  }

  async dismiss(ctx: ManagerContext, runId: string, cancel: boolean): Promise<DismissResult> {
    let run = await this.visible(ctx, runId);
    let cancelled = false;
    if (!isTerminalRun(run.status.state)) {
      if (!cancel) throw new SubagentError('RUN_ACTIVE', `run ${runId} is ${run.status.state}; dismiss it with cancel: true to cancel it first, or wait for it to end.`);
      const c = await this.cancel(ctx, runId);
      cancelled = true;
      if (!isTerminalRun(c.state as RunStatus['state'])) throw new SubagentError('RUN_ACTIVE', `run ${runId} could not be stopped yet; it stays listed until it ends.`);
      run = (await this.runs.read(runId)) ?? run;
    }
    await this.runs.markDismissed(runId, ctx.sessionId);
    // What is left of its worktrees lives on the machine that ran it: the pool's workers are asked to remove it
    // (docs/scale-out.md, "Worktree isolation over Redis"). Best effort: a worker that is down sweeps at its start.
    if (run.worker !== null) await this.runs.redis.publish(channels.cleanup(run.record.pool), runId).catch(() => 0);
    return { runId, state: run.status.state, dismissed: true, cancelled };
  }

  async restore(ctx: ManagerContext, lineage: string[]): Promise<RestoreResult> {
    const known: string[] = [];
    const unknown: string[] = [];
    for (const id of new Set(lineage)) {
      if (id === ctx.sessionId) continue;
      if (await this.runs.sessionKnown(id)) known.push(id);
      else unknown.push(id);
    }
    const before = await this.runs.lineage(ctx.sessionId);
    await this.runs.addAncestors(ctx.sessionId, known);
    const after = await this.runs.lineage(ctx.sessionId);
    const runs = (await this.summaries([...after].filter((id) => id !== ctx.sessionId), ctx.sessionId, false));
    const adopted = runs.filter((r) => r.adopted && !before.has(r.sessionId)).length;
    return { sessionId: ctx.sessionId, lineage: [...after], adopted, unknown, runs };
  }

  /** Every run's summary, newest first (the command line: it sees every session). */
  async everyRun(all: boolean): Promise<RunSummary[]> {
    const out: RunSummary[] = [];
    for (const id of await this.runs.allRuns(10_000)) {
      const r = await this.runs.read(id);
      if (!r || (r.dismissed && !all)) continue;
      out.push({
        runId: id, sessionId: r.record.sessionId, state: r.status.state, mode: r.record.mode, label: r.record.label,
        agents: r.record.agents, createdAt: r.record.createdAt, endedAt: r.status.endedAt,
        error: r.status.error ? { code: r.status.error.code, message: r.status.error.message } : null, adopted: false, dismissed: r.dismissed,
      });
    }
    return out;
  }

  /**
   * Removes ended runs whose end (or, dismissed, whose end too) is older than `olderThanMs`, never an active one
   * (docs/scale-out.md, "Limits"); with `dryRun`, only says which.
   */
  async collectGarbage(olderThanMs: number, dryRun: boolean, branches = false): Promise<{ removed: Array<{ runId: string; endedAt: string; dismissed: boolean }>; keptActive: number; keptRecent: number; dryRun: boolean; branchesAsked?: number }> {
    const cutoff = Date.now() - olderThanMs;
    const removed: Array<{ runId: string; endedAt: string; dismissed: boolean }> = [];
    let keptActive = 0;
    let keptRecent = 0;
    let branchesAsked = 0;
    for (const id of await this.runs.allRuns()) {
      const r = await this.runs.read(id);
      if (!r) continue;
      if (!isTerminalRun(r.status.state) || r.status.endedAt === null) { keptActive++; continue; }
      if (Date.parse(r.status.endedAt) > cutoff) { keptRecent++; continue; }
      removed.push({ runId: id, endedAt: r.status.endedAt, dismissed: r.dismissed });
      if (dryRun) continue;
      // A branch is in the checkout of the machine that ran its step: that worker deletes it, from its own copy of
      // the run (docs/scale-out.md, "Worktree isolation over Redis").
      const isolated = r.status.steps.some((s) => s.changes || s.members?.some((m) => m.changes));
      if (branches && isolated && r.worker !== null) {
        await this.runs.redis.publish(channels.cleanup(r.record.pool), JSON.stringify({ runId: id, branches: true })).catch(() => 0);
        branchesAsked++;
      }
      await this.runs.remove(r);
    }
    return { removed, keptActive, keptRecent, dryRun, ...(branches ? { branchesAsked } : {}) };
  }

  /** A full run id, or the one run whose id starts with `arg`; RUN_NOT_FOUND or INVALID_INPUT (ambiguous) otherwise. */
  async resolveRunId(arg: string): Promise<string> {
    const want = arg.trim();
    const prefix = want.startsWith('r-') ? want : `r-${want}`;
    const matches = (await this.runs.allRuns()).filter((id) => id === want || id.startsWith(prefix));
    if (matches.includes(want)) return want;
    if (matches.length === 1) return matches[0]!;
    if (matches.length > 1) throw new SubagentError('INVALID_INPUT', `${JSON.stringify(want.slice(0, 40))} matches ${matches.length} runs (${matches.slice(0, 5).join(', ')}); give more of the id.`);
    throw notFound(want.slice(0, 40));
  }

  /** Summaries of the runs of `sessions`, newest first (dismissed ones only with `all`). */
  private async summaries(sessions: string[], me: string, all: boolean): Promise<RunSummary[]> {
    const runs: Array<RunSummary> = [];
    for (const sid of sessions) {
      for (const id of await this.runs.sessionRuns(sid, 200)) {
        const r = await this.runs.read(id);
        if (!r || (r.dismissed && !all)) continue;
        const place = r.status.state === 'queued' ? await this.runs.queuePlace(id) : null;
        runs.push({
          runId: id, sessionId: r.record.sessionId, state: r.status.state, mode: r.record.mode, label: r.record.label,
          agents: r.record.agents, createdAt: r.record.createdAt, endedAt: r.status.endedAt,
          error: r.status.error ? { code: r.status.error.code, message: r.status.error.message } : null,
          adopted: r.record.sessionId !== me && (r.record.depth ?? 0) === 0, dismissed: r.dismissed, ...(place ? { queue: place } : {}),
        });
      }
    }
    return runs.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0)).slice(0, 200);
  }

  /**
   * A run whose worker died: BullMQ failed its job as stalled (maxStalledCount 0: never run again), or finished it
   * without the end reaching Redis. It ends failed/RUNNER_LOST (docs/scale-out.md, "Failures").
   */
  async reconcile(run: StoredRun): Promise<StoredRun> {
    if (isTerminalRun(run.status.state)) return run;
    if (run.status.state === 'queued') {
      if (Date.now() > run.record.queueDeadline && await this.repair()) return (await this.runs.read(run.record.runId)) ?? run;
      return run;
    }
    const job = await this.queue.state(run.record.runId);
    const lost = job === null ? run.worker !== null : job.state === 'failed' || job.state === 'completed' || job.stalled;
    if (!lost) return run;
    const who = run.worker ? `worker ${run.host ?? '?'} (${run.worker})` : 'its worker';
    const reason = job?.failedReason ? ` (${job.failedReason.slice(0, 120)})` : '';
    await this.runs.endRun(endedStatus(run.status, 'failed', { code: 'RUNNER_LOST', message: `${who} stopped holding the run${reason}; its agents were stopped by the runner on that machine, and it is never run again.` }));
    // Its nested runs on other workers lost the agent that launched them.
    void askChildrenToEnd(this.runs, this.queue, run.record.runId, { reason: 'PARENT_ENDED' }).catch(() => {});
    return (await this.runs.read(run.record.runId)) ?? run;
  }

  async status(ctx: ManagerContext, q: StatusQuery, o: { signal: AbortSignal }): Promise<StatusAnswer> {
    const waitMs = Math.min(q.waitMs ?? 0, ctx.settings.maxWaitMs);
    if (q.runId === undefined) return this.list(ctx, q, o.signal);
    const runId = q.runId;
    let run = await this.reconcile(await this.visible(ctx, runId));
    let info: WaitInfo | undefined;
    if (waitMs > 0) {
      if (isTerminalRun(run.status.state)) info = { waitedMs: 0, changed: false };
      else {
        const before = fingerprint(run.status);
        const start = performance.now();
        let changed = false;
        let wake: () => void = () => {};
        const stop = await this.notes.watch(runId, () => wake());
        try {
          const end = start + waitMs;
          let lastPoll = performance.now();
          while (!o.signal.aborted && performance.now() < end) {
            // The channel wakes this at once; the 1 s look behind it also catches a worker that died (it publishes nothing).
            await new Promise<void>((r) => {
              const t = setTimeout(r, Math.min(1000, Math.max(0, end - performance.now())));
              wake = () => { clearTimeout(t); r(); };
              o.signal.addEventListener('abort', wake, { once: true });
            });
            const polled = performance.now() - lastPoll >= 1000;
            const next = await this.runs.read(runId);
            if (!next) break;
            run = polled ? await this.reconcile(next) : next;
            if (polled) lastPoll = performance.now();
            if (isTerminalRun(run.status.state) || (q.until !== 'terminal' && fingerprint(run.status) !== before)) { changed = true; break; }
          }
        } finally {
          stop();
        }
        info = { waitedMs: Math.round(performance.now() - start), changed };
      }
    }
    const view = await renderDistributedRun(this.runs, ctx, run, q.outputBytes);
    return { kind: 'run', ...view, ...(info ?? {}) };
  }

  private async list(ctx: ManagerContext, q: StatusQuery, signal: AbortSignal): Promise<StatusAnswer> {
    const sessions = [...(await this.runs.lineage(ctx.sessionId))];
    let runs = await this.summaries(sessions, ctx.sessionId, q.all === true);
    const waitMs = Math.min(q.waitMs ?? 0, ctx.settings.maxWaitMs);
    let info: WaitInfo | undefined;
    const active = runs.filter((r) => !isTerminalRun(r.state as RunStatus['state']));
    if (waitMs > 0 && active.length === 0) info = { waitedMs: 0, changed: false };
    else if (waitMs > 0) {
      // The next change of any active run (their channels), or a run of the session appearing (the 1 s look).
      const print = (list: RunSummary[]) => list.map((r) => `${r.runId}=${r.state}`).join(';');
      const before = print(runs);
      const start = performance.now();
      let wake: () => void = () => {};
      const stops = await Promise.all(active.map((r) => this.notes.watch(r.runId, () => wake())));
      let changed = false;
      try {
        const end = start + waitMs;
        while (!signal.aborted && performance.now() < end) {
          await new Promise<void>((r) => {
            const t = setTimeout(r, Math.min(1000, Math.max(0, end - performance.now())));
            wake = () => { clearTimeout(t); r(); };
            signal.addEventListener('abort', wake, { once: true });
          });
          for (const r of active) await this.runs.read(r.runId).then((x) => x && this.reconcile(x)).catch(() => null);
          runs = await this.summaries(sessions, ctx.sessionId, q.all === true);
          if (print(runs) !== before) { changed = true; break; }
        }
      } finally {
        for (const stop of stops) stop();
      }
      info = { waitedMs: Math.round(performance.now() - start), changed };
    }
    const c = await this.runs.counts();
    return { kind: 'list', sessionId: ctx.sessionId, runs, capacity: { active: c.active, limit: ctx.settings.maxActiveRuns, queued: c.queued }, ...(info ?? {}) };
  }

  async cancel(ctx: ManagerContext, runId: string): Promise<CancelResult> {
    let run = await this.visible(ctx, runId);
    const answer = (r: StoredRun): CancelResult => ({ runId, state: r.status.state, error: r.status.error ? { code: r.status.error.code, message: r.status.error.message } : null, survivors: [] });
    if (isTerminalRun(run.status.state)) return answer(run);
    // A job no worker holds is removed from the queue and the run ends here; a held one is the worker's to stop.
    if (run.status.state === 'queued' || run.status.state === 'starting') {
      let removed = await this.queue.remove(runId);
      // A job whose run has no slot yet is offered to a worker and put back every 250 ms (src/worker/worker.ts): it is
      // locked only for those few milliseconds, so it is tried again; a job a worker keeps is that worker's to stop.
      for (let i = 0; removed === 'taken' && run.worker === null && i < 10; i++) {
        await sleep(50);
        run = (await this.runs.read(runId)) ?? run;
        if (isTerminalRun(run.status.state)) return answer(run);
        if (run.worker === null) removed = await this.queue.remove(runId);
      }
      if (removed !== 'taken') {
        await this.runs.endRun(endedStatus(run.status, 'cancelled', { code: 'CANCELLED', message: 'cancelled before a worker started it' }));
        return answer((await this.runs.read(runId)) ?? run);
      }
    }
    let wake: () => void = () => {};
    const stop = await this.notes.watch(runId, () => wake());
    try {
      await this.runs.redis.publish(channels.cancel(run.record.pool), runId);
      // The whole tree at once, as local mode's cancel does: each nested run stops within the same grace.
      await askChildrenToEnd(this.runs, this.queue, runId, { reason: 'CANCELLED', deep: true }).catch(() => []);
      const end = performance.now() + ctx.settings.killGraceMs + 5000;
      while (performance.now() < end) {
        run = (await this.runs.read(runId)) ?? run;
        if (isTerminalRun(run.status.state)) break;
        run = await this.reconcile(run);
        if (isTerminalRun(run.status.state)) break;
        await new Promise<void>((r) => { const t = setTimeout(r, 500); wake = () => { clearTimeout(t); r(); }; });
      }
    } finally {
      stop();
    }
    return answer(run);
  }

  async readBytes(ctx: ManagerContext, runId: string, part: 'output' | 'events' | { step: string; patch?: boolean }, offset: number, length: number): Promise<{ buf: Buffer; size: number }> {
    const run = await this.visible(ctx, runId);
    if (part === 'events') {
      const all = Buffer.from((await this.runs.events(runId)).map((e) => JSON.stringify(e)).join('\n') + '\n');
      return { buf: all.subarray(offset, offset + length), size: all.length };
    }
    const step = part === 'output' ? 'run' : part.step;
    if (part !== 'output' && !run.status.steps.some((s) => s.key === step || s.members?.some((m) => m.key === step))) throw notFound(runId);
    // An isolated step's patch is mirrored by its worker next to its output (src/worker/mirror.ts).
    const key = part !== 'output' && part.patch ? `${step}.patch` : step;
    const size = await this.runs.outputLength(runId, key);
    const buf = offset >= size ? Buffer.alloc(0) : await this.runs.outputRange(runId, key, offset, Math.min(size, offset + length) - 1);
    return { buf, size };
  }

  lineage(ctx: ManagerContext): Promise<Set<string>> {
    return this.runs.lineage(ctx.sessionId);
  }

  /** Every run's events from the feed stream (docs/watch-and-ui.md, "`watch` over Redis"). */
  async follow(since: FeedSince, signal: AbortSignal, onEntries: (entries: FeedEntry[]) => void | Promise<void>, onPlaced?: () => void, onAway?: (reason: string | null) => void): Promise<void> {
    const from = since === null ? null : since === 'start' ? FEED_START : 'cursor' in since ? since.cursor : feedIdBefore(since.sinceMs);
    if (from !== null && !isFeedId(from)) throw new SubagentError('INVALID_INPUT', `${JSON.stringify(from.slice(0, 60))} is not a cursor of this Redis's feed (one looks like 1796425051396-0); copy one from an earlier line, or use "start" or an age such as 10m.`);
    return followFeed(this.settings.redisUrl, from, signal, onEntries, onPlaced, onAway);
  }

  async health(): Promise<DistributedHealth> {
    const base = { url: redactRedisUrl(this.settings.redisUrl), pool: this.settings.pool };
    try {
      const info = await this.runs.serverInfo();
      const now = Date.now();
      const recent = 3 * this.settings.stallIntervalMs;
      const workers = (await this.runs.workers())
        .map((w) => ({ id: w.id, host: w.host, pool: w.pool, concurrency: w.concurrency, running: w.running, lastSeenMs: Math.max(0, now - w.at) }))
        .filter((w) => w.lastSeenMs <= recent);
      const c = await this.runs.counts();
      return { ...base, reachable: true, version: info.version, persistence: { aof: info.aof, rdb: info.rdbSaves }, workers, active: c.active, queued: c.queued, agents: c.agents };
    } catch (e) {
      return { ...base, reachable: false, problem: e instanceof SubagentError ? e.message : 'Redis could not be asked', workers: [] };
    }
  }

  async close(): Promise<void> {
    this.notes.close();
    await this.queue.close();
    this.runs.redis.disconnect();
  }
}

/**
 * A launch's isolation, checked as far as this server can (docs/scale-out.md, "Worktree isolation over Redis"): a
 * baseRef must look like a revision, and a cwd that exists on this machine must be inside a git working tree (the
 * pool's machines share checkout paths). The worker resolves the repository and the base commit itself, as a local
 * launch does, and ends the run failed naming the path when it cannot.
 */
async function checkIsolation(ctx: ManagerContext, cwd: string, input: LaunchInput): Promise<void> {
  if (input.isolation !== 'worktree') {
    if (input.baseRef !== undefined) throw new SubagentError('INVALID_INPUT', 'baseRef applies to isolated runs only: add isolation: "worktree", or use agents whose files say isolation: worktree.');
    return;
  }
  const ref = input.baseRef;
  if (ref !== undefined && (ref.startsWith('-') || /[\x00-\x20\x7f]/.test(ref))) {
    throw new SubagentError('INVALID_INPUT', `baseRef ${JSON.stringify(ref.slice(0, 100))} is not a git revision; give a branch, tag or commit (e.g. "main", "v1.2", a sha).`);
  }
  if (!fs.existsSync(cwd)) return;
  const gitBin = resolveBin('git', { pathEnv: ctx.env.PATH });
  if (!gitBin) return; // the worker needs git, not this server
  const wt = await import('../../lifecycle/worktree.js');
  try {
    await wt.repoOf(cwd, gitBin);
  } catch (e) {
    if (e instanceof wt.NotIsolatable) throw new SubagentError('INVALID_INPUT', e.message);
  }
}

/** What a waiter compares: the run's state and its steps' states. */
function fingerprint(s: RunStatus): string {
  return `${s.state}/${s.steps.map((st) => `${st.state}${st.members ? `[${st.members.map((m) => m.state).join(',')}]` : ''}`).join('|')}`;
}
