import { SubagentError } from '../errors.js';
import { isRunId } from '../ids.js';
import { isTerminalRun, type RunRecord, type RunMode } from '../store/run-types.js';
import type { ManagerContext } from './context.js';

/** What listings need of a run; run.json never changes, so each is read once per process. */
export interface RunMeta {
  runId: string;
  sessionId: string;
  rootRunId: string;
  parentRunId: string | null;
  createdAt: string;
  mode: RunMode;
  label: string | null;
  agents: string[];
  depth: number;
}

const metaCache = new Map<string, RunMeta | null>();

export function metaOf(record: RunRecord): RunMeta {
  const agents: string[] = [];
  for (const s of record.steps) {
    if (s.kind === 'agent') agents.push(s.agent.name);
    else for (const m of s.members) agents.push(m.agent.name);
  }
  return {
    runId: record.runId, sessionId: record.sessionId, rootRunId: record.rootRunId, parentRunId: record.parentRunId,
    createdAt: record.createdAt, mode: record.mode, label: record.label, agents: [...new Set(agents)], depth: record.depth,
  };
}

/** The run's meta, or null when it does not exist or its record is unreadable. */
export function readMeta(ctx: ManagerContext, runId: string): RunMeta | null {
  if (!isRunId(runId)) return null;
  if (metaCache.has(runId)) return metaCache.get(runId)!;
  let meta: RunMeta | null = null;
  try {
    const rec = ctx.store.readRecord(runId);
    // A record must name its own directory: a copied or planted run.json never speaks for another run.
    meta = rec && rec.runId === runId ? metaOf(rec) : null;
  } catch {
    meta = null;
  }
  // Only cache hits: a run being created right now may not have its record yet.
  if (meta) metaCache.set(runId, meta);
  return meta;
}

/** Owned by a session of ours (own or adopted), or nested under such a run. */
export function isVisible(ctx: ManagerContext, meta: RunMeta): boolean {
  const sessions = ctx.visibleSessions();
  if (sessions.has(meta.sessionId)) return true;
  if (meta.rootRunId !== meta.runId) {
    const root = readMeta(ctx, meta.rootRunId);
    if (root && sessions.has(root.sessionId)) return true;
  }
  return false;
}

/**
 * The one door to a run by id. A run that does not exist, is not ours, or whose id is malformed all answer the
 * same text, so an id reveals nothing about other sessions' runs.
 */
export function requireVisible(ctx: ManagerContext, runId: string): RunMeta {
  const meta = readMeta(ctx, runId);
  if (!meta || !isVisible(ctx, meta)) throw notFound(runId);
  return meta;
}

export function notFound(runId: string): SubagentError {
  const shown = isRunId(runId) ? runId : JSON.stringify(runId.slice(0, 40));
  return new SubagentError('RUN_NOT_FOUND', `no run ${shown} in this session; list your runs with status {} (after a client restart, use restore with the earlier sessionId).`);
}

/** Every run visible to this session, newest first. */
export function listVisible(ctx: ManagerContext): RunMeta[] {
  const out: RunMeta[] = [];
  for (const id of ctx.store.listRunIds()) {
    const m = readMeta(ctx, id);
    if (m && isVisible(ctx, m)) out.push(m);
  }
  return out.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
}

/** Every run in the state home (the command line for people sees all sessions). */
export function listAll(ctx: ManagerContext): RunMeta[] {
  const out: RunMeta[] = [];
  for (const id of ctx.store.listRunIds()) {
    const m = readMeta(ctx, id);
    if (m) out.push(m);
  }
  return out.sort((a, b) => (a.createdAt < b.createdAt ? 1 : a.createdAt > b.createdAt ? -1 : 0));
}

/** This session's own top-level runs that are still active (named in CAPACITY_EXHAUSTED). */
export function ownActiveRuns(ctx: ManagerContext): string[] {
  return listVisible(ctx).filter((m) => m.depth === 0).filter((m) => {
    try {
      const s = ctx.store.readStatus(m.runId);
      return s !== null && !isTerminalRun(s.state);
    } catch {
      return false;
    }
  }).map((m) => m.runId);
}
