import fs from 'node:fs';
import path from 'node:path';
import { SubagentError } from '../errors.js';
import { isSessionIdShape } from '../ids.js';
import { writeFileAtomic, ensurePrivateDir } from '../store/atomic-write.js';
import type { SessionRegistry } from '../store/ports.js';
import type { SessionRecord } from '../store/session-registry.js';
import { newSessionRecord, registerSession } from './session-record.js';
import type { ManagerContext } from './context.js';
import { listAll, type RunMeta } from './listing.js';
import { freshStatus } from './run-status.js';
import { summarize, type RunSummary } from './status-view.js';

/**
 * The sessions this session sees: itself and, transitively, every session it adopted and their recorded ancestors.
 * Computed from the registry on each call (cached briefly), so runs those sessions start later are seen too.
 * The server keeps its own record in memory and writes it back if the file is deleted or damaged while it runs.
 */
export class SessionView {
  private cache: { at: number; set: Set<string> } | null = null;
  private own: SessionRecord;
  constructor(readonly registry: SessionRegistry, readonly sessionId: string, private readonly runsDir: string) {
    this.own = newSessionRecord(sessionId);
  }

  async register(client: SessionRecord['client']): Promise<void> {
    this.own = await registerSession(this.registry, this.runsDir, this.own, client);
  }

  /** Takes over the record the server wrote at start (serve.ts), writing one only if there is none. */
  async adoptRecord(client: SessionRecord['client']): Promise<void> {
    let existing: SessionRecord | null = null;
    try { existing = this.registry.read(this.sessionId); } catch { existing = null; }
    if (existing && (client === null || existing.client !== null)) this.own = existing;
    else await this.register(client);
  }

  /** The recorded direct ancestors of this session (memory, file and link files together). */
  ownAncestors(): string[] {
    const onDisk = this.registry.read(this.sessionId)?.ancestors ?? [];
    return [...new Set([...this.own.ancestors, ...onDisk, ...this.registry.links(this.sessionId)])];
  }

  /**
   * Records `ids` as direct ancestors of this session, durably: a link file each (what survives the loss of the
   * session file), then the merged record. Under the session's lock: another server of the same session id may be
   * merging its own restore into the same file.
   */
  async addAncestors(ids: string[]): Promise<void> {
    await this.registry.withRecord(this.sessionId, () => {
      const made = this.registry.link(this.sessionId, ids);
      const rec = { ...this.own, ancestors: [...new Set([...this.ownAncestors(), ...ids])] };
      try {
        this.registry.write(rec);
      } catch (e) {
        this.registry.unlink(made); // the refusal says nothing was done: no link outlives it
        throw e;
      }
      this.own = rec;
    });
    this.invalidate();
  }

  private healing = false;

  /** Writes this session's record back if it was deleted or damaged behind our back (in the background, under the lock). */
  heal(): void {
    if (this.healing) return;
    try {
      if (this.registry.read(this.sessionId) !== null) return;
    } catch { /* unreadable: heal it */ }
    this.healing = true;
    void this.registry.withRecord(this.sessionId, () => {
      // Another server of this session id may have written it meanwhile: only a still-missing record is replaced.
      if (this.registry.read(this.sessionId) !== null) return;
      this.own = { ...this.own, ancestors: this.ownAncestors() };
      this.registry.write(this.own, { durable: false });
    }).catch(() => { /* best effort: the next call tries again */ }).finally(() => { this.healing = false; });
  }

  visible(): ReadonlySet<string> {
    const now = performance.now();
    if (this.cache && now - this.cache.at < 500) return this.cache.set;
    this.heal();
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
      const parents = id === this.sessionId ? this.ownAncestors() : this.registry.ancestorsOf(id, this.runsDir);
      for (const a of parents) if (!seen.has(a)) queue.push(a);
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

/** The refusal of `restore` in a server started by an agent (docs/contract.md, "Tools": nested servers refuse it). */
export function nestedRestoreRefusal(): SubagentError {
  return new SubagentError('INVALID_INPUT', 'restore is not available to a nested server (one started by an agent of a run): it sees only the runs of its own run tree. Use status {} to list them; restore belongs to the top-level conversation\'s server.');
}

/** docs/contract.md, "Tools": adopt every non-dismissed run of the named sessions and their ancestors, and record the relation. */
export async function restore(ctx: ManagerContext, view: SessionView, lineage: string[]): Promise<RestoreResult> {
  if (ctx.nesting) throw nestedRestoreRefusal();
  if (ctx.distributed) return ctx.distributed.restore(ctx, lineage);
  const all = listAll(ctx);
  const ownersWithRuns = new Set(all.map((m) => m.sessionId));
  const known: string[] = [];
  const unknown: string[] = [];
  for (const id of new Set(lineage)) {
    if (id === ctx.sessionId) continue;
    if (isSessionIdShape(id) && (ownersWithRuns.has(id) || view.registry.knows(id, ctx.layout.runsDir))) known.push(id);
    else unknown.push(id);
  }
  view.invalidate();
  const before = view.visible();
  await view.addAncestors(known);
  const after = view.visible();
  const newlyVisible = new Set([...after].filter((s) => !before.has(s)));
  let adopted = 0;
  for (const m of all) {
    if (!newlyVisible.has(m.sessionId) || m.depth !== 0) continue;
    if (!ctx.store.isDismissed(m.runId)) adopted++;
  }
  const visibleRuns = all.filter((m) => after.has(m.sessionId) && m.sessionId !== ctx.sessionId && m.depth === 0 && !ctx.store.isDismissed(m.runId));
  // Markers let the registry be rebuilt from the run directories if session files are lost.
  markAdoptedRuns(ctx, visibleRuns);
  const runs: RunSummary[] = [];
  for (const m of visibleRuns) {
    const s = await freshStatus(ctx, m.runId).catch(() => null);
    runs.push(summarize(ctx, m.runId, s));
  }
  const chain = [...view.closure([ctx.sessionId])];
  return { sessionId: ctx.sessionId, lineage: chain, adopted, unknown, runs };
}

const marked = new Set<string>();

/**
 * Leaves `runs/<run>/adopted-by/<session>.json` (owner inside) in each adopted top-level run, once per process: if the
 * session files are lost, a session's ancestors are rebuilt from these. Called by restore and for runs the adopted
 * sessions start later.
 */
export function markAdoptedRuns(ctx: ManagerContext, metas: RunMeta[]): void {
  for (const m of metas) {
    if (m.depth !== 0 || m.sessionId === ctx.sessionId || marked.has(m.runId)) continue;
    try {
      const dir = path.join(ctx.store.paths(m.runId).dir, 'adopted-by');
      ensurePrivateDir(dir);
      const f = path.join(dir, `${encodeURIComponent(ctx.sessionId)}.json`);
      if (!fs.existsSync(f)) writeFileAtomic(f, JSON.stringify({ owner: m.sessionId, at: new Date().toISOString() }), { durable: false });
      marked.add(m.runId);
    } catch { /* the session file is the primary record */ }
  }
}
