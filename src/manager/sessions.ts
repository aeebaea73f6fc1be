import fs from 'node:fs';
import path from 'node:path';
import { SubagentError } from '../errors.js';
import { isSessionIdShape } from '../ids.js';
import { writeFileAtomic, ensurePrivateDir } from '../store/atomic-write.js';
import { SessionRegistry, type SessionRecord } from '../store/session-registry.js';
import type { ManagerContext } from './context.js';
import { listAll, type RunMeta } from './listing.js';
import { freshStatus } from './run-status.js';
import { summarize, type RunSummary } from './status-view.js';

/**
 * The sessions this session sees: itself and, transitively, every session it adopted and their recorded ancestors.
 * Computed from the registry on each call (cached briefly), so runs those sessions start later are seen too.
 */
export class SessionView {
  private cache: { at: number; set: Set<string> } | null = null;
  readonly registry: SessionRegistry;
  constructor(private readonly home: string, readonly sessionId: string, private readonly runsDir: string) {
    this.registry = new SessionRegistry(home);
  }

  register(client: SessionRecord['client']): void {
    const existing = this.registry.read(this.sessionId);
    this.registry.write({
      v: 1, sessionId: this.sessionId, startedAt: existing?.startedAt ?? new Date().toISOString(),
      client: client ?? existing?.client ?? null, ancestors: existing?.ancestors ?? [],
    });
  }

  visible(): ReadonlySet<string> {
    const now = performance.now();
    if (this.cache && now - this.cache.at < 500) return this.cache.set;
    const set = this.closure([this.sessionId]);
    this.cache = { at: now, set };
    return set;
  }

  /** Breadth-first over recorded ancestors; cycles are ignored. Newest first. */
  closure(start: string[]): Set<string> {
    const seen = new Set<string>();
    const queue = [...start];
    while (queue.length) {
      const id = queue.shift()!;
      if (seen.has(id)) continue;
      seen.add(id);
      for (const a of this.registry.ancestorsOf(id, this.runsDir)) if (!seen.has(a)) queue.push(a);
    }
    return seen;
  }

  invalidate(): void { this.cache = null; }
}

export interface RestoreResult {
  sessionId: string;
  lineage: string[];
  adopted: number;
  unknown: string[];
  runs: RunSummary[];
}

/** SPEC §4.4: adopt every non-dismissed run of the named sessions and their ancestors, and record the relation. */
export async function restore(ctx: ManagerContext, view: SessionView, lineage: string[]): Promise<RestoreResult> {
  if (ctx.nesting) throw new SubagentError('INVALID_INPUT', 'restore is not available to a nested server: an agent sees the runs of its own tree only.');
  const all = listAll(ctx);
  const ownersWithRuns = new Set(all.map((m) => m.sessionId));
  const known: string[] = [];
  const unknown: string[] = [];
  for (const id of lineage) {
    if (id === ctx.sessionId) continue;
    if (isSessionIdShape(id) && (view.registry.exists(id) || ownersWithRuns.has(id))) known.push(id);
    else unknown.push(id);
  }
  const before = view.visible();
  const rec = view.registry.read(ctx.sessionId) ?? { v: 1 as const, sessionId: ctx.sessionId, startedAt: new Date().toISOString(), client: null, ancestors: [] };
  const ancestors = new Set(rec.ancestors);
  for (const id of known) ancestors.add(id);
  rec.ancestors = [...ancestors];
  view.registry.write(rec);
  view.invalidate();
  const after = view.visible();
  const newlyVisible = new Set([...after].filter((s) => !before.has(s)));
  // Markers let the registry be rebuilt from the run directories if a session file is lost.
  const adoptedRuns: RunMeta[] = [];
  for (const m of all) {
    if (!newlyVisible.has(m.sessionId) || m.depth !== 0) continue;
    markAdopted(ctx, m.runId, m.sessionId);
    if (!ctx.store.isDismissed(m.runId)) adoptedRuns.push(m);
  }
  const visibleRuns = all.filter((m) => after.has(m.sessionId) && m.sessionId !== ctx.sessionId && m.depth === 0 && !ctx.store.isDismissed(m.runId));
  const runs: RunSummary[] = [];
  for (const m of visibleRuns) {
    const s = await freshStatus(ctx, m.runId).catch(() => null);
    runs.push(summarize(ctx, m.runId, s));
  }
  const chain = [...view.closure([ctx.sessionId])];
  return { sessionId: ctx.sessionId, lineage: chain, adopted: adoptedRuns.length, unknown, runs };
}

function markAdopted(ctx: ManagerContext, runId: string, owner: string): void {
  try {
    const dir = path.join(ctx.store.paths(runId).dir, 'adopted-by');
    ensurePrivateDir(dir);
    const f = path.join(dir, `${encodeURIComponent(ctx.sessionId)}.json`);
    if (!fs.existsSync(f)) writeFileAtomic(f, JSON.stringify({ owner, at: new Date().toISOString() }), { durable: false });
  } catch { /* the session file is the primary record */ }
}
