import { SubagentError } from '../errors.js';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { findRunProcesses, runnerGroups } from '../process/terminate.js';
import { pruneAgentSlots } from '../runner/agent-slots.js';
import { withLedger, readLedger, type Ledger } from '../store/ledger.js';
import type { ManagerContext } from './context.js';

/** When this process first saw each unbound reservation (monotonic clock: wall-clock jumps change nothing). */
const firstSeenUnbound = new Map<string, number>();

/**
 * Drops reservations whose end is proven: an unbound one whose launching server is dead, or that this process has
 * seen unbound for longer than twice the handshake timeout; a bound one whose runner is dead and whose process
 * group is empty.
 */
export function pruneRoots(l: Ledger, handshakeTimeoutMs: number): void {
  const now = performance.now();
  for (const [runId, r] of Object.entries(l.roots)) {
    if (r.runner === null) {
      const seen = firstSeenUnbound.get(runId) ?? now;
      firstSeenUnbound.set(runId, seen);
      if (!isAlive(r.server) || now - seen > handshakeTimeoutMs * 2) {
        delete l.roots[runId];
        firstSeenUnbound.delete(runId);
      }
    } else if (!isAlive(r.runner) && findRunProcesses({ pgids: runnerGroups(r.runner) }).length === 0) {
      delete l.roots[runId];
    }
  }
  for (const root of Object.keys(l.trees)) {
    // A tree whose root holds no slot and whose budget nobody claims any more is finished.
    if (!l.roots[root] && !Object.keys(l.agents).some((k) => k.startsWith(`${root}:`)) && l.trees[root]!.used === 0) delete l.trees[root];
  }
}

export interface ReserveRequest {
  runId: string;
  /** Agent processes the launch's static steps will start (all or nothing). */
  claims: number;
  /** Names the step path of each claim, for the FANOUT_EXHAUSTED message. */
  claimPaths: string[];
  nested: { rootRunId: string } | null;
  treeLimits: { maxSpawns: number; maxDepth: number };
}

export interface Reservation {
  capacity: { active: number; limit: number };
  fanout: { used: number; limit: number; remaining: number };
}

/** Under the ledger lock: capacity (top-level), agent cap (nested), fan-out claims. Nothing is written on refusal. */
export async function reserve(ctx: ManagerContext, req: ReserveRequest): Promise<Reservation> {
  const { settings } = ctx;
  return withLedger(ctx.layout, (l) => {
    pruneRoots(l, settings.handshakeTimeoutMs);
    pruneAgentSlots(l);
    const active = Object.keys(l.roots).length;
    const limit = settings.maxActiveRuns;
    const rootId = req.nested ? req.nested.rootRunId : req.runId;
    let tree = l.trees[rootId];
    if (req.nested) {
      if (!tree) throw new SubagentError('RUN_NOT_ACTIVE', 'the run tree this agent belongs to has ended; nothing can be launched into it.');
      const liveAgents = Object.keys(l.agents).length;
      if (liveAgents >= settings.maxAgents) {
        throw new SubagentError('CAPACITY_EXHAUSTED', `${liveAgents} of ${settings.maxAgents} agent processes are live in this state home (SUBAGENTS_MAX_AGENTS); a nested launch is refused rather than queued. Finish without delegating, or retry after a sibling ends.`);
      }
    } else {
      if (limit > 0 && active >= limit) {
        throw new SubagentError('CAPACITY_EXHAUSTED', `${active} of ${limit} active runs`);
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
    if (!req.nested) l.roots[req.runId] = { at: new Date().toISOString(), server: ctx.server, runner: null };
    return {
      capacity: { active: Object.keys(l.roots).length, limit },
      fanout: { used: tree!.used, limit: tree!.limit, remaining: tree!.limit - tree!.used },
    };
  });
}

/** Binds a reservation to the runner that proved itself in the handshake. */
export async function bindReservation(ctx: ManagerContext, runId: string, runner: ProcessIdentity): Promise<void> {
  await withLedger(ctx.layout, (l) => {
    const r = l.roots[runId];
    if (!r) throw new SubagentError('HANDSHAKE_FAILED', 'the capacity reservation expired before the runner was ready');
    r.runner = runner;
  });
}

/** Returns a failed launch's reservation and its fan-out claims (no agent started). */
export async function releaseReservation(ctx: ManagerContext, runId: string, rootRunId: string, refund: number): Promise<void> {
  await withLedger(ctx.layout, (l) => {
    delete l.roots[runId];
    const tree = l.trees[rootRunId];
    if (tree) tree.used = Math.max(0, tree.used - refund);
    if (rootRunId === runId && tree && tree.used === 0) delete l.trees[rootRunId];
  });
}

/** A lock-free snapshot, for listings. */
export function capacitySnapshot(ctx: ManagerContext): { active: number; limit: number } {
  const l = readLedger(ctx.layout);
  return { active: Object.keys(l.roots).length, limit: ctx.settings.maxActiveRuns };
}

/** The live budget of a tree, or null once the tree has ended (callers then count the agents that started). */
export function fanoutSnapshot(ctx: ManagerContext, rootRunId: string): { used: number; limit: number; remaining: number } | null {
  const t = readLedger(ctx.layout).trees[rootRunId];
  if (!t) return null;
  return { used: t.used, limit: t.limit, remaining: Math.max(0, t.limit - t.used) };
}
