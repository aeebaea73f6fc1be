import fs from 'node:fs';
import { SubagentError } from '../errors.js';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { findRunProcesses, runnerGroups } from '../process/terminate.js';
import { pruneAgentSlots } from '../lifecycle/agent-slots.js';
import type { Ledger, RootReservation } from '../store/ledger.js';
import type { RunStore } from '../store/ports.js';
import { returnRunLocked } from '../lifecycle/run-lifecycle.js';
import { treeIsLive } from '../lifecycle/run-tree.js';
import { queuePosition, waitingCount, waitingLength } from '../lifecycle/queue.js';
import type { ManagerContext } from './context.js';

/** When this process first saw each reservation held by its launching server (monotonic clock: wall-clock jumps change nothing). */
const firstSeenUnbound = new Map<string, number>();

/**
 * Whether a root is still its launching server's to hold: unbound, or bound in the reservation to a warm runner whose
 * run has no `proceed` yet (that runner may never be told the run, or serve another: `boundEarly`).
 */
function heldByLauncher(r: RootReservation): boolean {
  return r.runner === null || r.boundEarly === true;
}

/**
 * Drops reservations whose end is proven: one held by its launching server (unbound, or bound early and not yet told
 * to proceed) whose server is dead, or that this process has seen so for longer than twice the launching server's
 * handshake timeout (the launch has given up by then: its bind fails, and it says proceed only within one handshake
 * timeout of its reservation); a bound one whose runner is dead, whose process group is empty, of whose tree no agent
 * slot is live and no nested run may still be going (a root holds its slot until its whole tree has ended: a runner
 * that ends with its tree still live leaves its slot to this). An early-bound root whose run has its `proceed` is an
 * ordinary bound one from then on. Trees whose root holds no slot any more are dropped: nothing can be launched into
 * them. Call after `pruneAgentSlots`.
 */
export function pruneRoots(l: Ledger, handshakeTimeoutMs: number, store: RunStore): void {
  const now = performance.now();
  for (const [runId, r] of Object.entries(l.roots)) {
    if (r.boundEarly && proceedSaid(store, runId)) delete r.boundEarly;
    if (heldByLauncher(r)) {
      const seen = firstSeenUnbound.get(runId) ?? now;
      firstSeenUnbound.set(runId, seen);
      const ttl = Math.max(handshakeTimeoutMs, r.handshakeMs ?? 0) * 2;
      if (!isAlive(r.server) || now - seen > ttl) {
        delete l.roots[runId];
        firstSeenUnbound.delete(runId);
        // Its reserved agent slot names the warm runner it was bound to, which lives on: it goes with the root.
        if (r.runner !== null) dropReservedSlots(l, runId);
      }
    } else {
      firstSeenUnbound.delete(runId);
      if (isAlive(r.runner)) continue;
      if (treeIsLive(l, store, runId)) continue;
      if (findRunProcesses({ pgids: runnerGroups(r.runner!) }).length === 0) delete l.roots[runId];
    }
  }
  for (const root of Object.keys(l.trees)) {
    if (!l.roots[root] && !l.queue?.[root]) delete l.trees[root]; // a queued run's tree holds its claims from acceptance
  }
  for (const runId of firstSeenUnbound.keys()) if (!l.roots[runId]) firstSeenUnbound.delete(runId);
}

/** Whether the run's launcher has said proceed (its runner may have started the run): the file stays for the run's life. */
function proceedSaid(store: RunStore, runId: string): boolean {
  try { return fs.existsSync(store.paths(runId).proceed); } catch { return false; } // a malformed id names no run
}

function dropReservedSlots(l: Ledger, runId: string): void {
  const prefix = `${runId}:reserved:`;
  for (const [key, slot] of Object.entries(l.agents)) if (key.startsWith(prefix) && slot.agent === null) delete l.agents[key];
}


export interface ReserveRequest {
  runId: string;
  /** Agent processes the launch's static steps will start (all or nothing). */
  claims: number;
  /** Names the step path of each claim, for the FANOUT_EXHAUSTED message. */
  claimPaths: string[];
  /**
   * A nested launch: reserves `agentSlots` agent slots (refused, never queued, when SUBAGENTS_MAX_AGENTS — the tree's
   * recorded `maxAgents` — has no room for them) instead of a capacity slot.
   */
  nested: { rootRunId: string; agentSlots: number; maxAgents: number } | null;
  /**
   * A top-level launch whose first step is one agent: its agent slot is reserved here too when the home has one free
   * (never refused or waited for: without one, the runner waits for a slot as before), so that its runner starts the
   * agent without a ledger section of its own (src/lifecycle/agent-slots.ts, `adoptReserved`).
   */
  firstAgent?: { maxAgents: number } | null;
  /**
   * A top-level launch that found a warm runner (manager/warm-pool.ts, `peekWarmRunner`): the reservation is bound to
   * it at once (`boundEarly`), one ledger section per launch instead of two. Its launch then claims exactly that
   * runner, or binds again to the one it did get (docs/architecture.md, "Warm runners").
   */
  runner?: ProcessIdentity | null;
  treeLimits: { maxSpawns: number; maxDepth: number };
}

export interface Reservation {
  capacity: { active: number; limit: number };
  fanout: { used: number; limit: number; remaining: number };
}

/**
 * Under the ledger lock: capacity (top-level), agent slots (nested), fan-out claims, and with `runner` the bind too.
 * Nothing is written on refusal.
 */
export async function reserve(ctx: ManagerContext, req: ReserveRequest): Promise<Reservation> {
  const { settings } = ctx;
  return ctx.ledger.change((l) => {
    pruneAgentSlots(l);
    pruneRoots(l, settings.handshakeTimeoutMs, ctx.store);
    const limit = settings.maxActiveRuns;
    const rootId = req.nested ? req.nested.rootRunId : req.runId;
    let tree = l.trees[rootId];
    if (req.nested) {
      if (!tree) throw new SubagentError('RUN_NOT_ACTIVE', 'the run tree this agent belongs to has ended; nothing can be launched into it.');
      const liveAgents = Object.keys(l.agents).length;
      const { agentSlots, maxAgents } = req.nested;
      if (liveAgents + agentSlots > maxAgents) {
        throw new SubagentError('CAPACITY_EXHAUSTED', `${liveAgents} of ${maxAgents} agent processes are live or reserved in this state home (SUBAGENTS_MAX_AGENTS) and this launch needs ${agentSlots} more; a nested launch is refused rather than queued (a waiting parent could deadlock). Do the work in this agent, launch fewer agents at once, or retry after one of your nested runs ends.`);
      }
    } else {
      const active = Object.keys(l.roots).length;
      if (limit > 0 && active >= limit) {
        throw new SubagentError('CAPACITY_EXHAUSTED', `${active} of ${limit} active runs`);
      }
      // A slot that is free while runs wait in the queue is theirs (a hand-off is on its way): no overtaking.
      const waiting = waitingCount(l);
      if (limit > 0 && waiting > 0) {
        throw new SubagentError('CAPACITY_EXHAUSTED', `${active} of ${limit} active runs and ${waiting} launches waiting in the queue`);
      }
      tree = { used: 0, limit: req.treeLimits.maxSpawns, maxDepth: req.treeLimits.maxDepth };
    }
    const remaining = tree!.limit - tree!.used;
    if (req.claims > remaining) {
      const first = req.claimPaths[Math.max(0, remaining)] ?? `step ${remaining}`;
      throw new SubagentError('FANOUT_EXHAUSTED', `the run tree's fan-out budget has ${remaining} of ${tree!.limit} agent starts left and this launch needs ${req.claims}; ${first} does not fit. Use fewer steps, or let the tree finish.`);
    }
    tree!.used += req.claims;
    l.trees[rootId] = tree!;
    const at = new Date().toISOString();
    if (!req.nested) {
      const runner = req.runner ?? null;
      l.roots[req.runId] = { at, server: ctx.server, runner, handshakeMs: settings.handshakeTimeoutMs, ...(runner ? { boundEarly: true as const } : {}) };
      if (req.firstAgent && Object.keys(l.agents).length < req.firstAgent.maxAgents) {
        l.agents[`${req.runId}:reserved:0`] = { runner: runner ?? ctx.server, agent: null, at, root: req.runId };
      }
    } else {
      for (let i = 0; i < req.nested.agentSlots; i++) l.agents[`${req.runId}:reserved:${i}`] = { runner: ctx.server, agent: null, at, root: rootId };
    }
    return {
      capacity: { active: Object.keys(l.roots).length, limit },
      fanout: { used: tree!.used, limit: tree!.limit, remaining: tree!.limit - tree!.used },
    };
  });
}

/**
 * Binds a reservation (a top-level run's capacity slot, the agent slots reserved for its first step) to the runner that
 * proved itself in the handshake: from now on it is released only on that runner's proven end.
 */
export async function bindReservation(ctx: ManagerContext, runId: string, runner: ProcessIdentity, nested: boolean): Promise<void> {
  await ctx.ledger.change((l) => {
    if (!nested) {
      const r = l.roots[runId];
      if (!r) throw new SubagentError('HANDSHAKE_FAILED', 'the capacity reservation expired before the runner was ready');
      r.runner = runner;
      delete r.boundEarly; // bound to the runner this launch holds: an ordinary bound reservation
    }
    for (const [key, slot] of Object.entries(l.agents)) if (key.startsWith(`${runId}:reserved:`)) slot.runner = runner;
    // Not fsynced (docs/contract.md, invariant 1): only a crash of the machine loses it, which leaves the launching
    // server dead too, and pruning returns an unbound reservation of a dead server. Two fsyncs fewer before proceed.
  }, { durable: false });
}

/** Returns a failed launch's reservation, its agent slots and its fan-out claims (no agent started). */
export async function releaseReservation(ctx: ManagerContext, runId: string, rootRunId: string, refund: number): Promise<void> {
  const run = { runId, rootRunId, depth: rootRunId === runId ? 0 : 1 };
  await ctx.ledger.change((l) => returnRunLocked(l, ctx.store, run, refund));
}

/**
 * A top-level launch's refusal decided from a lock-free read of the ledger (written whole, by rename), when every
 * slot in it is held beyond doubt: each bound root's runner alive, each unbound root's launching server alive and
 * not yet past the time `pruneRoots` gives it here. The locked reservation would prune none of them and refuse too,
 * so a launch at a full home answers without queueing for the lock every launch and runner of the home shares, and
 * without writing a run directory it then throws away (32 callers at a full home: refusals were most of the lock's
 * traffic). Null whenever that is not certain (a slot that may be prunable, an unreadable ledger, no limit): the
 * locked reservation decides, and returns dead runners' slots.
 */
export function refusalWithoutLock(ctx: ManagerContext): string | null {
  const limit = ctx.settings.maxActiveRuns;
  if (limit <= 0) return null;
  const l = ctx.ledger.peek();
  if (!l) return null;
  const roots = Object.entries(l.roots);
  if (roots.length < limit) return null;
  const now = performance.now();
  for (const [runId, r] of roots) {
    if (!heldByLauncher(r)) {
      if (!isAlive(r.runner)) return null;
    } else {
      const seen = firstSeenUnbound.get(runId);
      const ttl = Math.max(ctx.settings.handshakeTimeoutMs, r.handshakeMs ?? 0) * 2;
      if (!isAlive(r.server) || (seen !== undefined && now - seen > ttl)) return null;
      // Bound early and maybe told to proceed since (the flag goes at the next locked prune): its runner's death frees it.
      if (r.runner !== null && !isAlive(r.runner)) return null;
    }
  }
  return `${roots.length} of ${limit} active runs`;
}

/** At most one locked prune per this interval per process, while a candidate stays (a tree still winding down). */
const STALE_PRUNE_INTERVAL_MS = 1000;
let lastStalePruneMs = -Infinity;

/**
 * Returns the slots of roots whose end is proven (pruneRoots), when a lock-free look finds a candidate: a bound root
 * whose runner is gone, or an unbound one whose launching server is. Without it, a root whose runner was lost while
 * its nested runs lived kept its slot after the last of them ended — the sweep looks only at non-terminal runs — until
 * the next launch pruned it; listings meanwhile showed a full capacity and no active run. The sweep and listings call
 * it; the ledger lock is taken only when there is a candidate.
 */
export async function releaseStaleRoots(ctx: ManagerContext): Promise<void> {
  const l = ctx.ledger.peek();
  if (l === null) return;
  const candidate = Object.values(l.roots).some((r) => (r.runner !== null && !isAlive(r.runner)) || (heldByLauncher(r) && !isAlive(r.server)));
  if (!candidate || performance.now() - lastStalePruneMs < STALE_PRUNE_INTERVAL_MS) return;
  lastStalePruneMs = performance.now();
  await ctx.ledger.change((led) => {
    pruneAgentSlots(led);
    pruneRoots(led, ctx.settings.handshakeTimeoutMs, ctx.store);
  }).catch(() => { /* busy or refused: the next sweep or listing tries again */ });
}

/** A lock-free snapshot, for listings: active slots, their limit, and the launches waiting in the queue. */
export function capacitySnapshot(ctx: ManagerContext): { active: number; limit: number; queued: number } {
  const l = ctx.ledger.read();
  return { active: Object.keys(l.roots).length, limit: ctx.settings.maxActiveRuns, queued: waitingLength(l) };
}

/** A queued run's place in the queue, from a lock-free read; null once it has left the queue. */
export function queueSnapshot(ctx: ManagerContext, runId: string): { position: number; length: number } | null {
  return queuePosition(ctx.ledger.read(), runId);
}

/** The live budget of a tree, or null once the tree has ended (callers then count the agents that started). */
export function fanoutSnapshot(ctx: ManagerContext, rootRunId: string): { used: number; limit: number; remaining: number } | null {
  const t = ctx.ledger.read().trees[rootRunId];
  if (!t) return null;
  return { used: t.used, limit: t.limit, remaining: Math.max(0, t.limit - t.used) };
}
