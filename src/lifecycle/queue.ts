import fs from 'node:fs';
import path from 'node:path';
import { SubagentError } from '../errors.js';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import type { DetachedOptions } from '../process/detached-start.js';
import { findRunProcesses, runnerGroups, terminateProcesses } from '../process/terminate.js';
import type { Layout } from '../store/layout.js';
import { peekLedger, type Ledger, type QueueEntry } from '../store/ledger.js';
import type { CapacityLedger, RunStore } from '../store/ports.js';
import { isTerminalRun, type RunStatus } from '../store/run-types.js';
import { QUEUED_LAUNCH_FILE, QueuedLaunchFile, readStateFile, type QueuedLaunch } from '../store/state-files.js';
import { awaitReady, HandshakeFailure, proceedAndAwaitStart, type StartedRunner } from './handshake.js';
import { endRun } from './run-lifecycle.js';

/**
 * The queue of top-level launches waiting for a capacity slot (docs/limits.md, "The queue"). It lives in the ledger,
 * under the ledger lock like the slots it waits for; there is no daemon. Whoever frees a slot (a runner at its end,
 * a reconciliation, a cancel, a failed handshake) calls `handOff`, which gives free slots to the head of the queue
 * and starts those runs, acting as their launcher; a process that dies mid-way leaves its entry marked with its dead
 * identity, and the next `handOff` of any process (a server's launch, listing or sweep) starts the run again.
 */

/** The environment variable that tells a handed-off runner which start attempt it is. */
export const ATTEMPT_ENV = 'SUBAGENTS_RUN_ATTEMPT';

export { QUEUED_LAUNCH_FILE, type QueuedLaunch };

/** The queue in start order: acceptance order, which is round-robin across sessions by their oldest queued run. */
export function queueOrder(l: Ledger): Array<[string, QueueEntry]> {
  return Object.entries(l.queue ?? {}).sort((a, b) => a[1].seq - b[1].seq);
}

/**
 * The runs still waiting, in order: an entry a hand-off has picked is on its way to start (its run `starting`) and
 * never waits again — a repair starts it again at once — so positions only ever decrease.
 */
export function waitingOrder(l: Ledger): Array<[string, QueueEntry]> {
  return queueOrder(l).filter(([, e]) => !e.handoff);
}

/** A queued run's 1-based position and the queue's length, or null when it is not waiting. */
export function queuePosition(l: Ledger, runId: string): { position: number; length: number } | null {
  const order = waitingOrder(l);
  const i = order.findIndex(([id]) => id === runId);
  return i < 0 ? null : { position: i + 1, length: order.length };
}

export interface EnqueueRequest {
  runId: string;
  sessionId: string;
  deadline: number;
  limit: number;
  claims: number;
  claimPaths: string[];
  treeLimits: { maxSpawns: number; maxDepth: number };
  maxQueued: number;
  handshakeMs: number;
}

/**
 * Adds a launch to the queue (caller holds the ledger lock): its tree's fan-out claimed now, all or nothing, so a
 * queued run never fails later for budget. Refused past SUBAGENTS_MAX_QUEUED.
 */
export function enqueueLocked(l: Ledger, req: EnqueueRequest): { position: number; length: number } {
  const queue = (l.queue ??= {});
  const length = waitingOrder(l).length;
  if (length >= req.maxQueued) {
    throw new SubagentError('CAPACITY_EXHAUSTED', `${Object.keys(l.roots).length} of ${req.limit} active runs and the queue holds ${length} of ${req.maxQueued} launches (SUBAGENTS_MAX_QUEUED)`);
  }
  if (req.claims > req.treeLimits.maxSpawns) {
    const first = req.claimPaths[req.treeLimits.maxSpawns] ?? `step ${req.treeLimits.maxSpawns}`;
    throw new SubagentError('FANOUT_EXHAUSTED', `the run tree's fan-out budget has ${req.treeLimits.maxSpawns} agent starts and this launch needs ${req.claims}; ${first} does not fit. Use fewer steps.`);
  }
  l.trees[req.runId] = { used: req.claims, limit: req.treeLimits.maxSpawns, maxDepth: req.treeLimits.maxDepth };
  const seq = (l.queueSeq ?? 0) + 1;
  l.queueSeq = seq;
  queue[req.runId] = {
    seq, sessionId: req.sessionId, at: new Date().toISOString(), deadline: req.deadline, limit: req.limit,
    claims: req.claims, handshakeMs: req.handshakeMs, handoff: null,
  };
  return queuePosition(l, req.runId)!;
}

/** Takes a run out of the queue with its tree's claims (a queued run that is cancelled or times out). */
export function dequeueLocked(l: Ledger, runId: string): boolean {
  if (!l.queue?.[runId]) return false;
  delete l.queue[runId];
  if (!l.roots[runId]) delete l.trees[runId];
  return true;
}

/** Queued runs no process is handing a slot to yet: a new launch waits behind them rather than overtake them. */
export function waitingCount(l: Ledger): number {
  return Object.entries(l.queue ?? {}).filter(([id, e]) => !inProgress(l, id, e)).length;
}

/** Launches waiting for a slot (for listings' `capacity.queued` and doctor). */
export function waitingLength(l: Ledger): number {
  return waitingOrder(l).length;
}

/** A hand-off in progress by a live process, or one whose reservation is still held (its runner may still be starting). */
function inProgress(l: Ledger, runId: string, e: QueueEntry): boolean {
  return !!e.handoff && (l.roots[runId] !== undefined || isAlive(e.handoff.by));
}

interface Picked { runId: string; attempt: number }

/**
 * Under the ledger lock: queued runs past their deadline are named (the caller ends them QUEUE_TIMEOUT, taking them
 * out of the queue as it does: `endQueued`), and the head of the queue gets each free slot, reserved to `self`
 * (unbound, like a launch's), marked with the attempt.
 */
export function pickLocked(l: Ledger, self: ProcessIdentity, now = Date.now()): { start: Picked[]; expired: string[] } {
  const start: Picked[] = [];
  const expired: string[] = [];
  for (const [runId, e] of queueOrder(l)) {
    if (inProgress(l, runId, e)) continue;
    if (e.deadline <= now) {
      expired.push(runId);
      continue;
    }
    // Strictly in order: a head that does not fit (its launcher's limit is lower) holds the ones behind it.
    if (e.limit > 0 && Object.keys(l.roots).length >= e.limit) break;
    const attempt = (e.handoff?.attempt ?? 0) + 1;
    e.handoff = { by: self, attempt };
    l.roots[runId] = { at: new Date().toISOString(), server: self, runner: null, handshakeMs: e.handshakeMs };
    start.push({ runId, attempt });
  }
  return { start, expired };
}

/** What a process needs to hand slots over: the state home, its own identity and a way to start a detached runner. */
export interface HandOffHost {
  store: RunStore;
  layout: Layout;
  ledger: CapacityLedger;
  self: ProcessIdentity;
  spawn: (argv: string[], options: DetachedOptions) => StartedRunner | Promise<StartedRunner>;
  /** SUBAGENTS_TEST_FAULT: this process SIGKILLs itself at the named point of a hand-off (the repair is tested so). */
  fault?: string | undefined;
  signal?: AbortSignal;
  /** Run under the ledger lock before the pick: a server returns the slots of dead runners here first. */
  prune?: (l: Ledger) => void;
}

function fault(host: HandOffHost, point: string): void {
  if (host.fault === point) process.kill(process.pid, 'SIGKILL');
}

/** Whether the state home has queued launches, from a lock-free read (most slot releases find none). */
export function queueIsEmpty(layout: Layout): boolean {
  const l = peekLedger(layout);
  return l !== null && Object.keys(l.queue ?? {}).length === 0;
}

/**
 * Whether a hand-off could do anything, from a lock-free read: a queued run past its deadline, or a waiting head
 * and a slot that is free or whose holder may be gone (the locked pass prunes it). A queue behind slots that are
 * all provably held needs nothing, and listings at a full home must not each take the ledger lock to find that out.
 */
export function handOffNeeded(layout: Layout, now = Date.now()): boolean {
  const l = peekLedger(layout);
  if (l === null) return true;
  const waiting = queueOrder(l).filter(([id, e]) => !inProgress(l, id, e));
  if (waiting.length === 0) return Object.entries(l.queue ?? {}).some(([, e]) => e.handoff && !isAlive(e.handoff.by));
  if (waiting.some(([, e]) => e.deadline <= now)) return true;
  const head = waiting[0]![1];
  const roots = Object.values(l.roots);
  if (head.limit <= 0 || roots.length < head.limit) return true;
  // A root bound early (a warm runner not yet told its run) is its launching server's until proceed, as an unbound one.
  return roots.some((r) => (r.runner !== null && !isAlive(r.runner)) || ((r.runner === null || r.boundEarly) && !isAlive(r.server)));
}

const running = new WeakMap<Layout, Promise<number>>();

/**
 * Hands free slots to the head of the queue and starts those runs; repeats while a start fails (its slot is free
 * again). Returns how many runs it started. Concurrent calls in one process share one pass.
 */
export function handOff(host: HandOffHost): Promise<number> {
  if (!handOffNeeded(host.layout)) return Promise.resolve(0);
  const current = running.get(host.layout);
  if (current) return current;
  const p = handOffLoop(host).finally(() => running.delete(host.layout));
  running.set(host.layout, p);
  return p;
}

async function handOffLoop(host: HandOffHost): Promise<number> {
  let started = 0;
  for (let round = 0; round < 64; round++) {
    const { start, expired } = await host.ledger.change((l) => { host.prune?.(l); return pickLocked(l, host.self); });
    for (const runId of expired) await endQueued(host, runId, 'QUEUE_TIMEOUT').catch(() => {});
    if (start.length === 0) break;
    fault(host, 'handoff-after-pick');
    const outcomes = await Promise.all(start.map((p) => startQueued(host, p).catch(() => 'failed' as const)));
    started += outcomes.filter((o) => o === 'started').length;
    if (!outcomes.some((o) => o !== 'started')) break;
  }
  return started;
}

/** Ends a queued run that never started (QUEUE_TIMEOUT, or cancelled), its queue entry and claims returned. */
export async function endQueued(on: { store: RunStore; layout: Layout; ledger: CapacityLedger }, runId: string, why: 'QUEUE_TIMEOUT' | 'CANCELLED'): Promise<RunStatus | null> {
  const record = on.store.readRecord(runId);
  if (!record) return null;
  // The entry's removal and the end are one step under the run's lock: whoever else looks at the run under it (a
  // reconciliation asking whether a queued run was ever queued) sees it queued with its entry, or ended.
  const r = await on.store.withRunLock(runId, async () => {
    await on.ledger.change((l) => { dequeueLocked(l, runId); });
    return endRun(on, record, why === 'QUEUE_TIMEOUT'
      ? { state: 'failed', error: { code: 'QUEUE_TIMEOUT', message: 'the run waited in the queue past its queue timeout (queueTimeoutMs, SUBAGENTS_QUEUE_TIMEOUT_MS) and never started; launch it again, or raise the timeout' }, from: ['queued', 'starting'] }
      : { state: 'cancelled', error: { code: 'CANCELLED', message: 'the run was cancelled while it waited in the queue; it never started' }, from: ['queued', 'starting'] }, { locked: true });
  });
  if (r.ours) on.store.event(runId, { type: 'dequeued', state: r.status.state, error: r.status.error?.code ?? null });
  return r.status;
}

/** Drops a picked entry whose run is no longer waiting (it ended, or started in an earlier attempt), and our reservation. */
async function forget(host: HandOffHost, runId: string): Promise<void> {
  await host.ledger.change((l) => {
    if (l.queue) delete l.queue[runId];
    const r = l.roots[runId];
    if (r && r.runner === null && r.server.pid === host.self.pid && r.server.startTime === host.self.startTime) {
      delete l.roots[runId];
      delete l.trees[runId];
    }
  });
}

/**
 * Starts one picked run as its launcher: `queued` (or `starting` of a dead hand-off's attempt) → `starting` with this
 * attempt, then the launch's own handshake — spawn, ready, bind, proceed. A failure records failed/HANDSHAKE_FAILED
 * like a launch's, which returns the slot (and the caller hands it on).
 */
async function startQueued(host: HandOffHost, picked: Picked): Promise<'started' | 'gone' | 'failed'> {
  const { store } = host;
  const { runId, attempt } = picked;
  const record = store.readRecord(runId);
  if (!record) { await forget(host, runId); return 'gone'; }
  const paths = store.paths(runId);
  const claimed = await store.withRunLock(runId, () => {
    const s = store.readStatus(runId);
    if (!s || isTerminalRun(s.state) || s.startedAt !== null || (s.state !== 'queued' && s.state !== 'starting')) return null;
    // A runner of an earlier attempt (its hand-off died) may still wait for proceed: its attempt is no longer the
    // run's, so it never claims the start, and it reports ready in its own file. A proceed left by that attempt goes.
    try { fs.unlinkSync(paths.proceed); } catch { /* none */ }
    return store.updateLocked(runId, (cur: RunStatus) => ({ ...cur, state: 'starting', attempt, launcher: host.self }), { durable: false });
  });
  if (!claimed || claimed.state !== 'starting' || claimed.attempt !== attempt) { await forget(host, runId); return 'gone'; }
  fault(host, 'handoff-after-starting');
  const deadline = performance.now() + record.handshakeTimeoutMs;
  const signal = host.signal ?? new AbortController().signal;
  let child: StartedRunner | null = null;
  let runner: ProcessIdentity | null = null;
  let phase: 'spawn' | 'ready' | 'bind' | 'proceed' = 'spawn';
  try {
    const launch = readStateFile<QueuedLaunch>(path.join(paths.dir, QUEUED_LAUNCH_FILE), QueuedLaunchFile);
    if (!launch) throw new HandshakeFailure('spawn', `${QUEUED_LAUNCH_FILE} is missing`, null);
    child = await host.spawn([process.execPath, launch.runnerMain, paths.dir], {
      cwd: paths.dir, env: { ...launch.env, [ATTEMPT_ENV]: String(attempt) }, logFile: paths.runnerLog,
    });
    fault(host, 'handoff-after-spawn');
    const wait = { paths, child, deadline, signal, readyFile: paths.readyOf(attempt) };
    runner = await awaitReady(wait);
    phase = 'bind';
    const ready = runner;
    await host.ledger.change((l) => {
      const r = l.roots[runId];
      if (!r || r.server.pid !== host.self.pid) throw new HandshakeFailure('bind', 'the capacity reservation expired before the runner was ready', ready);
      r.runner = ready;
    });
    fault(host, 'handoff-after-bind');
    phase = 'proceed';
    const started = await proceedAndAwaitStart(wait, runner);
    if (started.startedAt === null) throw new HandshakeFailure('proceed', `the run became ${started.state} at its start`, runner);
    fault(host, 'handoff-after-proceed');
    await host.ledger.change((l) => { if (l.queue) delete l.queue[runId]; }).catch(() => {});
    store.event(runId, { type: 'launched', runnerPid: runner.pid, handedOffBy: host.self.pid, attempt });
    return 'started';
  } catch (e) {
    const f = e instanceof HandshakeFailure ? e : new HandshakeFailure(phase, e instanceof Error ? e.message : 'unknown failure', runner);
    const ended = await endRun(host, record, {
      state: 'failed', error: { code: 'HANDSHAKE_FAILED', message: `the runner of the queued run failed at the ${f.phase} phase: ${f.reason}` }, from: ['starting'],
    }).catch(() => null);
    if (ended && ended.status.startedAt !== null) {
      await host.ledger.change((l) => { if (l.queue) delete l.queue[runId]; }).catch(() => {});
      return 'started';
    }
    const pid = runner?.pid ?? child?.pid;
    if (pid) {
      const who = runner;
      if (who) await terminateProcesses(() => findRunProcesses({ pgids: runnerGroups(who) }), 0).catch(() => {});
      else try { process.kill(-pid, 'SIGKILL'); } catch { /* gone */ }
    }
    store.event(runId, { type: 'handshake-failed', phase: f.phase, attempt });
    return 'failed';
  }
}
