import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { adapterFor, allAdapters } from '../agents/adapters/index.js';
import { buildAgentEnv, DEFERRED_CA_CERTS } from '../agents/agent-env.js';
import type { AgentDefinition } from '../agents/types.js';
import { SubagentError } from '../errors.js';
import { newRunId } from '../ids.js';
import { isAlive, readIdentity, type ProcessIdentity } from '../process/identity.js';
import { spawnDetached, type DetachedChild } from '../process/spawn-detached.js';
import { readTail } from '../store/text-tail.js';
import { endRun } from '../lifecycle/run-lifecycle.js';
import { newStepStatus } from '../store/step-status.js';
import type { PreparedRun, PublishedRun } from '../store/run-store.js';
import type { DistributedLink } from '../store/state-files.js';
import { firstStepWidth, type AgentTaskSpec, type RunMode, type RunRecord, type RunStatus, type StepSpec } from '../store/run-types.js';
import { CATALOG_SNAPSHOT_NAME, catalogFor, catalogSnapshotJson, freezeAgent } from './agent-resolver.js';
import { bindReservation, pruneRoots, refusalWithoutLock, releaseReservation, reserve, type Reservation } from './capacity.js';
import { RUNNER_MAIN, type ManagerContext } from './context.js';
import { awaitReady, awaitStart, handshakeError, HandshakeFailure, proceedAndAwaitStart, sayProceed, type HandshakePhase } from '../lifecycle/handshake.js';
import { checkNesting } from './nesting.js';
import { claimWarmRunner, forgetPeek, type ClaimedWarmRunner, peekWarmRunner, takeForTest, warmLaunchSettled } from './warm-pool.js';
import { resolveRunCwd } from './roots.js';
import { indexRun, ownActiveRuns, rememberMeta } from './listing.js';
import { rememberRecord } from './run-peek.js';
import { originalUmask } from './original-umask.js';
import { enqueueLocked, QUEUED_LAUNCH_FILE, type QueuedLaunch } from '../lifecycle/queue.js';
import { pruneAgentSlots } from '../lifecycle/agent-slots.js';
import { serveQueue } from './queue.js';
import { resolveIsolation, type IsolationInput } from './isolation.js';

export interface AgentTaskInput { agent: string; task: string }
export interface GroupInput { parallel: AgentTaskInput[]; concurrency?: number; failFast?: boolean }
export type ChainEntryInput = AgentTaskInput | GroupInput;

/** A launch as the tool layer hands it over: shape already checked, exactly one of single / parallel / chain. */
export type LaunchInput = {
  cwd?: string;
  timeoutMs?: number;
  label?: string;
  model?: string;
  /** false: refuse CAPACITY_EXHAUSTED at a full home instead of queueing (docs/limits.md, "The queue"). */
  queue?: boolean;
  queueTimeoutMs?: number;
} & IsolationInput & (
  | { mode: 'single'; step: AgentTaskInput }
  | { mode: 'parallel'; group: GroupInput }
  | { mode: 'chain'; chain: ChainEntryInput[] }
);

export interface LaunchResult {
  runId: string;
  sessionId: string;
  state: string;
  mode: RunMode;
  steps: Array<{ index: number; agent: string; state: string }>;
  fanout: Reservation['fanout'];
  capacity: Reservation['capacity'];
  /** Only for a queued launch: its 1-based place in the queue and the queue's length. */
  queue?: { position: number; length: number };
}

export const DEFAULT_CONCURRENCY = 4;

/** Turns the input's steps into frozen step specs (agents resolved, models checked). */
export function buildSteps(ctx: ManagerContext, catalog: Map<string, AgentDefinition>, entries: ChainEntryInput[], model?: string): StepSpec[] {
  let modelUsed = model === undefined;
  const task = (e: AgentTaskInput): AgentTaskSpec => {
    const agent = freezeAgent(ctx, catalog, e.agent);
    let m: string | undefined;
    if (model !== undefined && agent.models?.includes(model)) { m = model; modelUsed = true; }
    return { agent, task: e.task, ...(m ? { model: m } : {}) };
  };
  const steps = entries.map((e): StepSpec => ('parallel' in e
    ? { kind: 'group', members: e.parallel.map(task), concurrency: e.concurrency ?? DEFAULT_CONCURRENCY, failFast: e.failFast ?? false }
    : { kind: 'agent', ...task(e) }));
  if (!modelUsed) {
    throw new SubagentError('INVALID_INPUT', `model ${JSON.stringify(model!.slice(0, 64))} is not one of the models the launched agents allow (their \`models\` lists); omit model to use each agent's default.`);
  }
  return steps;
}

/** Agent processes a list of steps will start: one per agent step, one per group member. */
export function claimPaths(steps: StepSpec[], offset = 0): string[] {
  const out: string[] = [];
  steps.forEach((s, i) => {
    if (s.kind === 'agent') out.push(`step ${i + offset} (${s.agent.name})`);
    else s.members.forEach((m, j) => out.push(`step ${i + offset} member ${j} (${m.agent.name})`));
  });
  return out;
}

/** A top-level launch's CAPACITY_EXHAUSTED, naming the caller's own active runs (docs/contract.md, "Tools") and what to do. */
function capacityRefusal(ctx: ManagerContext, counts: string): SubagentError {
  const mine = ownActiveRuns(ctx).slice(0, 5);
  const hint = mine.length
    ? ` Your active runs: ${mine.join(', ')}; wait on one with status { runId, waitMs } (until: "terminal"), or cancel one.`
    : ' None of them belong to this session; wait with status { waitMs } and retry.';
  return new SubagentError('CAPACITY_EXHAUSTED', `${counts} in this state home (SUBAGENTS_MAX_ACTIVE_RUNS).${hint}`);
}

export interface LaunchOptions {
  signal: AbortSignal;
  onProgress?: (phase: string) => void;
  /**
   * A worker's launch of a distributed run (docs/scale-out.md, "Nested delegation"): the Redis the run belongs to,
   * written 0600 into the run's directory for its runner, which hands it to nested servers through budget files.
   */
  distributedLink?: DistributedLink;
  /** A worker's launch: the run keeps its distributed run id in the worker's home (docs/scale-out.md). */
  runId?: string;
  /** A worker's launch: the run tree's budgets of the server that accepted it (docs/scale-out.md, "Capacity across machines"). */
  treeLimits?: RunRecord['limits'];
}

/**
 * docs/contract.md, "Run states", in order: validate and resolve → reserve capacity and claim fan-out under the ledger lock → write the
 * run record → spawn the detached runner → ready → bind → proceed → answer. Any failure before proceed records the
 * run failed/HANDSHAKE_FAILED, starts no agent, verifies the runner gone and returns what was reserved.
 * The bind's ledger write is done while the runner boots, to the identity of the process we started; the ready
 * report must name that same identity before the bind counts and proceed is sent (docs/architecture.md, "Launch").
 */
export async function launch(ctx: ManagerContext, input: LaunchInput, o: LaunchOptions): Promise<LaunchResult> {
  if (ctx.distributed) return ctx.distributed.launch(ctx, input);
  const { settings } = ctx;
  if (process.platform === 'win32') throw new SubagentError('PLATFORM_UNSUPPORTED', 'launch needs Linux or macOS (process groups and detached runners); agents and doctor work on Windows.');
  if (input.timeoutMs !== undefined && input.timeoutMs > settings.maxTimeoutMs) {
    throw new SubagentError('INVALID_INPUT', `timeoutMs ${input.timeoutMs} is above the maximum of ${settings.maxTimeoutMs} ms (SUBAGENTS_MAX_TIMEOUT_MS).`);
  }
  if (input.queueTimeoutMs !== undefined && input.queueTimeoutMs > settings.maxTimeoutMs) {
    throw new SubagentError('INVALID_INPUT', `queueTimeoutMs ${input.queueTimeoutMs} is above the maximum of ${settings.maxTimeoutMs} ms (SUBAGENTS_MAX_TIMEOUT_MS).`);
  }
  // Nested: the secret must still be valid now (its step may have ended since this server started).
  const nesting = ctx.nesting ? checkNesting(ctx.store, ctx.nesting.parentRunId, ctx.nesting.secretHash) : null;
  if (ctx.nesting && !nesting) throw new SubagentError('RUN_NOT_ACTIVE', 'the step that started this server has ended; nothing can be launched from it any more.');
  const parentRecord = nesting ? ctx.store.readRecord(nesting.parentRunId) : null;
  const rootRecord = nesting ? ctx.store.readRecord(nesting.rootRunId) : null;
  // A distributed worker's run keeps the budgets of the server that accepted it (docs/scale-out.md, "Capacity across machines").
  const limits = rootRecord ? rootRecord.limits : o.treeLimits ?? { maxSpawns: settings.maxSpawnsPerRun, maxDepth: settings.maxDepth };
  const depth = parentRecord ? parentRecord.depth + 1 : 0;
  if (depth + 1 > limits.maxDepth) {
    throw new SubagentError('DEPTH_EXCEEDED', `this run tree allows agents to depth ${limits.maxDepth} and a launch from here would start agents at depth ${depth + 1}; do the work in this agent instead of delegating.`);
  }

  if (!nesting) void serveQueue(ctx); // any launch repairs the queue (a hand-off whose process died)
  const cwd = parentRecord && input.cwd === undefined ? parentRecord.cwd : resolveRunCwd(ctx, input.cwd);
  const catalog = await catalogFor(ctx);
  const entries: ChainEntryInput[] = input.mode === 'single' ? [input.step] : input.mode === 'parallel' ? [input.group] : input.chain;
  const steps = buildSteps(ctx, catalog, entries, input.model);
  // Before anything is reserved or written: a repository that cannot be isolated is a refusal.
  const isolation = await resolveIsolation(ctx, cwd, input, steps);
  const paths = claimPaths(steps);
  // A worker runs a distributed run under the id Redis gave it, so its branches and worktrees carry that id
  // (docs/scale-out.md, "Worktree isolation over Redis").
  const runId = o.runId ?? newRunId();
  const rootRunId = nesting ? nesting.rootRunId : runId;

  const handshakeTimeoutMs = parentRecord?.handshakeTimeoutMs ?? settings.handshakeTimeoutMs;
  const record: RunRecord = {
    v: 1, runId, sessionId: ctx.sessionId, mode: input.mode, cwd, label: input.label ?? null,
    createdAt: new Date().toISOString(), timeoutMs: input.timeoutMs ?? null,
    // A nested server runs with its agent's environment (no operator settings): the tree's own values apply.
    defaultStepTimeoutMs: parentRecord?.defaultStepTimeoutMs ?? settings.defaultTimeoutMs,
    killGraceMs: parentRecord?.killGraceMs ?? settings.killGraceMs,
    handshakeTimeoutMs, maxOutputBytes: parentRecord?.maxOutputBytes ?? settings.maxOutputBytes,
    maxAgents: parentRecord?.maxAgents ?? settings.maxAgents,
    passEnv: treePassEnv(ctx, parentRecord), umask: originalUmask(), depth, rootRunId, parentRunId: nesting?.parentRunId ?? null,
    parentStepKey: nesting?.parentStepKey ?? null, limits, runToken: randomBytes(24).toString('base64url'),
    server: ctx.server, steps, ...(isolation ? { isolation } : {}),
  };
  const status: RunStatus = {
    v: 1, runId, state: 'starting', error: null, startedAt: null, endedAt: null, updatedAt: record.createdAt,
    runner: null, steps: steps.map((s, i) => newStepStatus(i, s)), appendsTaken: 0, survivors: [],
  };
  // A nested run's agent cap is the tree's (its server's own environment is the agent's, not the operator's).
  const nested = nesting ? { rootRunId, agentSlots: firstStepWidth(steps), maxAgents: parentRecord?.maxAgents ?? settings.maxAgents } : null;
  // A full home whose every slot is provably held refuses before the lock and before any write (refusals are cheap,
  // and they no longer queue ahead of the launches that can be admitted).
  // Nested launches are never queued: they are charged to agent slots and the tree's budget, which refuse instead.
  const queueing = !nesting && input.queue !== false && settings.maxActiveRuns > 0;
  const queued = (indexed?: Promise<void>) => enqueueLaunch(ctx, { record, status, catalog, steps, paths, envFor: input.mode === 'chain' ? [...catalog.values()] : null, queueTimeoutMs: input.queueTimeoutMs ?? settings.queueTimeoutMs, indexed });
  const refusal = nesting ? null : refusalWithoutLock(ctx);
  if (refusal) {
    if (queueing) return queued();
    throw capacityRefusal(ctx, refusal);
  }
  // Reserved first (docs/contract.md, "Run states"). While the reservation's ledger write is on the disk, this thread writes the run's
  // directory under a hidden name: nothing sees it until it is published, after the reservation holds.
  const firstAgent = !nesting && steps[0]?.kind === 'agent' ? { maxAgents: settings.maxAgents } : null;
  // An idle runner of the pool, looked at now: a top-level reservation is bound to it in the same ledger section, and
  // the launch then claims that very runner (docs/architecture.md, "Warm runners"). A nested launch's agent slots are
  // bound as before, to the runner it gets (they have no root to be held by its server).
  const peeked = peekWarmRunner(ctx);
  const boundTo = nesting || !peeked ? null : { pid: peeked.pid, startTime: peeked.startTime };
  // An early-bound reservation is pruned as its server's own once seen for twice the handshake timeout without a
  // proceed (manager/capacity.ts, `pruneRoots`): this launch says proceed within one, or not at all.
  const proceedBy = performance.now() + handshakeTimeoutMs;
  const reserving = reserve(ctx, { runId, claims: paths.length, claimPaths: paths, nested, firstAgent, treeLimits: limits, runner: boundTo });
  reserving.catch(() => {}); // awaited below
  // Indexed first (listings read the index, not every run directory): the index may name a run that was never
  // created (skipped), never miss one that was. Its fdatasync runs beside the reservation's fsyncs, not after them:
  // a launch refused under the lock leaves a line that names no run.
  const indexed = indexRun(ctx.layout, [ctx.sessionId, rootRecord?.sessionId], runId);
  indexed.catch(() => {}); // observed by publish (or the queue's), which may fail before it gets there
  // One turn of the event loop first: the ledger section has taken its lock and read the ledger, and runs on in
  // microtasks up to its write's fsync on the thread pool. Prepared before that turn, the directory's writes held the
  // ledger write back (and the lock every process of the home shares) for their whole length.
  await new Promise<void>((resolve) => setImmediate(resolve));
  let prepared: PreparedRun | null = null;
  let prepareFailure: unknown = null;
  try {
    const extra: Record<string, string> = nesting ? {} : { [CATALOG_SNAPSHOT_NAME]: catalogSnapshotJson(ctx, catalog) };
    if (o.distributedLink) extra[path.basename(ctx.store.paths(runId).distributedLink)] = JSON.stringify(o.distributedLink);
    prepared = ctx.store.prepare(record, status, extra);
  } catch (e) {
    prepareFailure = e;
  }
  let reservation: Reservation;
  try {
    reservation = await reserving;
    testFault(ctx, 'server-after-reserve');
    // Test seam: the runner the reservation was bound to is taken by "another server" before this launch's claim.
    if (peeked && ctx.env.SUBAGENTS_TEST_FAULT === 'warm-taken-after-reserve') takeForTest(ctx, peeked);
  } catch (e) {
    forgetPeek(ctx, peeked);
    if (prepared) ctx.store.discard(prepared);
    if (e instanceof SubagentError && e.code === 'CAPACITY_EXHAUSTED' && !nesting) {
      if (queueing) return queued(indexed);
      throw capacityRefusal(ctx, e.message);
    }
    throw e;
  }

  let created: PublishedRun;
  try {
    if (!prepared) throw prepareFailure;
    created = await ctx.store.publish(prepared, indexed);
    rememberMeta(record);
    rememberRecord(ctx, record);
    if (nesting) ctx.store.addChild(nesting.parentRunId, runId, nesting.parentStepKey);
  } catch (e) {
    forgetPeek(ctx, peeked);
    await releaseReservation(ctx, runId, rootRunId, paths.length).catch(() => {});
    removeQuietly(ctx.store.layout.runDir(runId));
    if (e instanceof SubagentError) throw e;
    throw new SubagentError('INTERNAL', `could not write the run record (${(e as NodeJS.ErrnoException).code ?? 'I/O error'}) in the state home; nothing was started. Check free space and permissions of ${settings.home}.`);
  }

  o.onProgress?.('spawn');
  const envFor = input.mode === 'chain' ? [...catalog.values()] : null;
  const deadline = performance.now() + handshakeTimeoutMs;
  let child: DetachedChild | null = null;
  let phase: HandshakePhase = 'spawn';
  let runner = null;
  const runPaths = created.paths;
  let started: RunStatus;
  let askedWarmPool = false;
  let warm: ClaimedWarmRunner | null = null;
  try {
    // A launch abandoned before its spawn (the server shutting down) starts no runner at all.
    if (o.signal.aborted) throw new HandshakeFailure('spawn', 'the launch was cancelled or the server is shutting down', null);
    const env = runnerEnv(ctx, steps, treePassEnv(ctx, parentRecord), envFor);
    // The runner the reservation is bound to is told to proceed before its claim (docs/architecture.md, "Warm
    // runners"): its identity was proven before the claim (announced, then found alive under it once taken), only
    // that process reads the claim, and nothing it is waited for comes between. It then finds proceed the moment it
    // has its run — one wake-up of each process per launch. The run's directory must be durable first (nothing
    // starts, and nothing is acknowledged, of a run whose directory is not on disk): awaited before the take, so the
    // take, proceed and the claim follow each other at once.
    if (boundTo) await created.durable;
    const proceedFirst = boundTo ? (taken: ProcessIdentity): boolean => {
      if (!sameProcess(boundTo, taken)) return false; // another server took the bound one: the handshake as below
      testFault(ctx, 'server-after-spawn');
      phase = 'bind'; // bound already, in the reservation
      testFault(ctx, 'server-after-bind');
      phase = 'proceed';
      if (o.signal.aborted) throw new HandshakeFailure('proceed', 'the launch was cancelled or the server is shutting down', null);
      if (performance.now() > proceedBy) throw new HandshakeFailure('proceed', 'the handshake timed out (SUBAGENTS_HANDSHAKE_TIMEOUT_MS)', null);
      sayProceed(runPaths);
      return true;
    } : undefined;
    // A pre-booted idle runner when the home has one (manager/warm-pool.ts): the one the reservation is bound to
    // unless another server took it meanwhile; else one booted for this run.
    askedWarmPool = true;
    warm = claimWarmRunner(ctx, runPaths.dir, env, peeked, proceedFirst);
    forgetPeek(ctx, peeked);
    child = warm?.child
      ?? await spawnDetached([process.execPath, RUNNER_MAIN, runPaths.dir], { cwd: runPaths.dir, env, logFile: runPaths.runnerLog });
    const wait = { paths: runPaths, child, deadline, signal: o.signal };
    if (warm?.proceedSaid) {
      runner = warm.runner;
      o.onProgress?.('ready');
      // Its death from here on is seen by the pool's liveness poll, as HANDSHAKE_FAILED at the proceed phase.
      started = await awaitStart(wait, runner);
    } else {
      testFault(ctx, 'server-after-spawn');
      // Bound while the runner boots (the server is idle for those ~30 ms): to the process we started, as /proc shows
      // it now. Its ready report must then name exactly this process, or the launch fails and releases what it holds.
      const spawned = warm ? warm.runner : child.pid === undefined ? null : readIdentity(child.pid);
      const early = spawned ? bindReservation(ctx, runId, spawned, nesting !== null) : null;
      early?.catch(() => {}); // awaited after ready
      // Any other warm runner's identity was proven before its claim too: it is told to proceed once bound, without
      // waiting for its ready report (it still writes one, for reconciliation).
      runner = warm ? warm.runner : await awaitReady(wait);
      phase = 'bind';
      o.onProgress?.('ready');
      if (spawned && spawned.startTime !== runner.startTime) {
        throw new HandshakeFailure('ready', 'the ready report does not match the runner process that was started', null);
      }
      await (early ?? bindReservation(ctx, runId, runner, nesting !== null));
      await created.durable; // nothing starts, and nothing is acknowledged, of a run whose directory is not on disk
      testFault(ctx, 'server-after-bind');
      phase = 'proceed';
      started = await proceedAndAwaitStart(wait, runner);
    }
    // Only the runner sets startedAt (when it claims the start): a run that already ran and ended — a first step that
    // failed at once — started all the same.
    if (started.startedAt === null) throw new HandshakeFailure('proceed', `the run became ${started.state} at its start`, runner);
    o.onProgress?.('started');
  } catch (e) {
    const failure = e instanceof HandshakeFailure ? e : new HandshakeFailure(phase, e instanceof Error ? e.message : 'unknown failure', runner);
    const outcome = await abandonLaunch(ctx, record, failure, child?.pid ?? null, runner);
    if (outcome === 'started') return result(ctx, ctx.store.readStatus(runId)!, input.mode, reservation);
    // The end was not recorded here (the run lock stayed busy): the reservation goes back all the same, as nothing started.
    if (outcome === 'unrecorded') await releaseReservation(ctx, runId, rootRunId, paths.length).catch(() => {});
    if (!nesting) void serveQueue(ctx); // the slot this launch gave back goes to the queue's head
    throw handshakeError(failure, runId);
  } finally {
    forgetPeek(ctx, peeked);
    if (askedWarmPool) warmLaunchSettled(ctx, warm);
  }
  ctx.store.event(runId, { type: 'launched', runnerPid: runner.pid });
  return result(ctx, started, input.mode, reservation);
}

interface QueuedLaunchInput {
  record: RunRecord;
  status: RunStatus;
  catalog: Map<string, AgentDefinition>;
  steps: StepSpec[];
  paths: string[];
  envFor: AgentDefinition[] | null;
  queueTimeoutMs: number;
  /** The run's index line, when the launch appended it before it found the home full. */
  indexed?: Promise<void> | undefined;
}

/**
 * A launch at a full home, accepted into the queue (docs/limits.md, "The queue"): the run's directory is written and
 * fsynced as `queued` with what a hand-off needs to start its runner (`queued.json`: the runner's entry and the
 * environment this server would give it), then its entry is added to the ledger's queue with its tree's fan-out
 * claimed — the acknowledgement. A refusal there (the queue is full, the budget too small) removes the directory.
 */
async function enqueueLaunch(ctx: ManagerContext, q: QueuedLaunchInput): Promise<LaunchResult> {
  const { settings } = ctx;
  const { record, steps } = q;
  const runId = record.runId;
  const status: RunStatus = { ...q.status, state: 'queued' };
  const deadline = Date.now() + q.queueTimeoutMs;
  const launchFile: QueuedLaunch = { runnerMain: RUNNER_MAIN, env: runnerEnv(ctx, steps, treePassEnv(ctx, null), q.envFor), deadline, limit: settings.maxActiveRuns };
  let created: PublishedRun;
  try {
    const prepared = ctx.store.prepare(record, status, {
      [CATALOG_SNAPSHOT_NAME]: catalogSnapshotJson(ctx, q.catalog),
      [QUEUED_LAUNCH_FILE]: JSON.stringify(launchFile),
    });
    const indexed = q.indexed ?? indexRun(ctx.layout, [ctx.sessionId], runId);
    indexed.catch(() => {});
    created = await ctx.store.publish(prepared, indexed);
    await created.durable;
    testFault(ctx, 'server-before-enqueue');
  } catch (e) {
    removeQuietly(ctx.store.layout.runDir(runId));
    if (e instanceof SubagentError) throw e;
    throw new SubagentError('INTERNAL', `could not write the run record (${(e as NodeJS.ErrnoException).code ?? 'I/O error'}) in the state home; nothing was queued. Check free space and permissions of ${settings.home}.`);
  }
  let accepted: { position: number; length: number; active: number };
  try {
    accepted = await ctx.ledger.change((l) => {
      pruneAgentSlots(l);
      pruneRoots(l, settings.handshakeTimeoutMs, ctx.store);
      const pos = enqueueLocked(l, {
        runId, sessionId: ctx.sessionId, deadline, limit: settings.maxActiveRuns,
        claims: q.paths.length, claimPaths: q.paths, treeLimits: record.limits, maxQueued: settings.maxQueued,
        handshakeMs: record.handshakeTimeoutMs,
      });
      return { ...pos, active: Object.keys(l.roots).length };
    });
  } catch (e) {
    removeQuietly(ctx.store.layout.runDir(runId));
    if (e instanceof SubagentError && e.code === 'CAPACITY_EXHAUSTED') throw capacityRefusal(ctx, e.message);
    throw e;
  }
  testFault(ctx, 'server-after-enqueue');
  ctx.store.event(runId, { type: 'queued', position: accepted.position });
  // A slot may have come free since the launch found none: the queue's head (perhaps this run) gets it now.
  void serveQueue(ctx);
  const r: LaunchResult = {
    runId, sessionId: ctx.sessionId, state: 'queued', mode: record.mode, steps: stepsOf(status, record.mode),
    fanout: { used: q.paths.length, limit: record.limits.maxSpawns, remaining: record.limits.maxSpawns - q.paths.length },
    capacity: { active: accepted.active, limit: settings.maxActiveRuns },
    queue: { position: accepted.position, length: accepted.length },
  };
  return r;
}

function stepsOf(s: RunStatus, mode: RunMode): LaunchResult['steps'] {
  return mode === 'parallel'
    ? (s.steps[0]!.members ?? []).map((m) => ({ index: m.index, agent: m.agent, state: m.state }))
    : s.steps.map((st) => ({ index: st.index, agent: st.agent, state: st.state }));
}

function result(ctx: ManagerContext, s: RunStatus, mode: RunMode, r: Reservation): LaunchResult {
  const runId = s.runId;
  const steps = stepsOf(s, mode);
  return { runId, sessionId: ctx.sessionId, state: s.state, mode, steps, fanout: r.fanout, capacity: r.capacity };
}

/**
 * Records the failed handshake (`endRun`, compare-and-set from `starting` under the run lock: if the runner claimed the
 * start first, the run is live and the launch succeeded after all), which returns the reservation, then makes sure
 * the runner is gone. 'unrecorded': the end could not be written (the run lock stayed busy twice).
 */
async function abandonLaunch(ctx: ManagerContext, record: RunRecord, f: HandshakeFailure, childPid: number | null, runner: { pid: number; startTime: string } | null): Promise<'started' | 'failed' | 'unrecorded'> {
  // The runner's own last words (its fatal error, never agent output) go into the record for `status`, not into the refusal.
  const tail = readTail(ctx.store.paths(record.runId).runnerLog, 2048);
  const end = () => endRun(ctx, record, {
    state: 'failed',
    error: { code: 'HANDSHAKE_FAILED', message: `the runner failed at the ${f.phase} phase: ${f.reason}` },
    from: ['starting'],
    ...(tail ? { runnerLogTail: tail } : {}),
  });
  // Once more if the first attempt failed (the run lock stayed busy): a run left `starting` by a live launcher is
  // never reconciled while that launcher lives.
  const ended = await end().catch(() => end()).catch(() => null);
  if (ended && ended.status.startedAt !== null) return 'started';
  ctx.store.event(record.runId, { type: 'handshake-failed', phase: f.phase });
  // The runner never started an agent (the start is claimed under the lock we just used); stop it and verify.
  const pid = runner?.pid ?? childPid;
  if (pid) {
    try { process.kill(-pid, 'SIGKILL'); } catch { /* already gone */ }
    const end = performance.now() + 2000;
    while (performance.now() < end) {
      const alive = runner ? isAlive(runner) : readIdentity(pid) !== null; // only its pid known: running and not a zombie
      if (!alive) break;
      await new Promise((r) => setTimeout(r, 5));
    }
  }
  return ended ? 'failed' : 'unrecorded';
}

function sameProcess(a: { pid: number; startTime: string }, b: { pid: number; startTime: string }): boolean {
  return a.pid === b.pid && a.startTime === b.startTime;
}

function removeQuietly(dir: string): void {
  try { fs.rmSync(dir, { recursive: true, force: true }); } catch { /* best effort */ }
}

/**
 * The runner's environment: only what its agents may receive (the allowlist, pass-through, the backends'
 * credentials, the agents' named variables), never the rest of the server's environment.
 */
/**
 * The pass-through list of a run: a nested run keeps its tree's (a nested server runs with an agent's environment,
 * where SUBAGENTS_PASS_ENV is not set, and would otherwise drop what the operator passed to the root's agents).
 */
function treePassEnv(ctx: ManagerContext, parentRecord: RunRecord | null): string[] {
  return parentRecord?.passEnv ?? ctx.settings.passEnv;
}

function runnerEnv(ctx: ManagerContext, steps: StepSpec[], passEnv: string[], appendable: AgentDefinition[] | null): Record<string, string> {
  const credentialEnv = new Set<string>();
  const agentEnv = new Set<string>();
  const each = (a: AgentTaskSpec) => {
    for (const n of adapterFor(a.agent.backend)?.credentialEnv ?? []) credentialEnv.add(n);
    for (const n of a.agent.env) agentEnv.add(n);
  };
  for (const s of steps) if (s.kind === 'agent') each(s); else s.members.forEach(each);
  if (appendable) {
    // A chain may be given steps of any agent later (append): its runner must hold what those agents may receive.
    for (const a of allAdapters()) for (const n of a.credentialEnv) credentialEnv.add(n);
    for (const d of appendable) for (const n of d.env) agentEnv.add(n);
  }
  const env = buildAgentEnv({ source: ctx.env, passEnv, credentialEnv: [...credentialEnv], agentEnv: [...agentEnv], extra: {} });
  // The runner itself makes no TLS connection: loading a CA bundle would double its start (measured), so the
  // value travels under another name and the runner hands it to its agents as NODE_EXTRA_CA_CERTS.
  if (env.NODE_EXTRA_CA_CERTS !== undefined) {
    env[DEFERRED_CA_CERTS] = env.NODE_EXTRA_CA_CERTS;
    delete env.NODE_EXTRA_CA_CERTS;
  }
  if (ctx.env.SUBAGENTS_TEST_FAULT) env.SUBAGENTS_TEST_FAULT = ctx.env.SUBAGENTS_TEST_FAULT;
  // A worker's runs (docs/scale-out.md, "Failures"): the runner stops its agents when the worker that started it dies.
  if (ctx.env.SUBAGENTS_SUPERVISOR) env.SUBAGENTS_SUPERVISOR = ctx.env.SUBAGENTS_SUPERVISOR;
  return env;
}

/** Test seam: the server SIGKILLs itself at a launch phase (reclaim of a dead launcher's reservation is tested so). */
function testFault(ctx: ManagerContext, phase: string): void {
  if (ctx.env.SUBAGENTS_TEST_FAULT === phase) process.kill(process.pid, 'SIGKILL');
}
