import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import type { ManagerContext } from './context.js';
import { damagedRecords, listAll, type RunMeta } from './listing.js';
import { freshStatus } from './run-status.js';
import { isTerminalRun, type RunStatus } from '../store/run-types.js';
import { branchesOfRuns, deleteBranches, removeEndedRunsWorktrees } from './isolation.js';
import { servesRun, someProcessServes } from '../process/identity.js';

/** What retention decided for one run tree (a top-level run and the runs nested under it go together). */
export interface GcCandidate {
  rootRunId: string;
  runIds: string[];
  /** The latest end of the tree's runs. */
  endedAt: string;
  dismissed: boolean;
  bytes: number;
}

export interface GcReport {
  cutoff: string;
  removed: GcCandidate[];
  /** Trees kept because a run of them is active (never removed) or ended too recently. */
  keptActive: number;
  keptRecent: number;
  bytesFreed: number;
  dryRun: boolean;
  /** Worktrees of ended runs removed (isolated steps' directories; their branches stay). */
  worktreesRemoved: number;
  /** With `branches`: branches of removed runs deleted (or, in a dry run, that would be). */
  branchesDeleted: number;
}

/** Bytes of every regular file under `p`, never following a symlink; a file linked twice (a run's output) counts once. */
export function diskBytes(p: string, seen = new Set<string>()): number {
  let st: fs.Stats;
  try { st = fs.lstatSync(p); } catch { return 0; }
  if (st.isFile()) {
    if (st.nlink > 1) {
      const id = `${st.dev}:${st.ino}`;
      if (seen.has(id)) return 0;
      seen.add(id);
    }
    return st.size;
  }
  if (!st.isDirectory()) return 0;
  let total = 0;
  let names: string[] = [];
  try { names = fs.readdirSync(p); } catch { return 0; }
  for (const n of names) total += diskBytes(path.join(p, n), seen);
  return total;
}

/** A run's end for retention: its endedAt, else (a damaged status) the last time its status file changed. */
function endOf(ctx: ManagerContext, runId: string, s: RunStatus | null): number {
  if (s?.endedAt) return Date.parse(s.endedAt);
  try { return fs.statSync(ctx.store.paths(runId).status).mtimeMs; } catch { return Date.now(); }
}

/**
 * Retention (docs/contract.md, "Command line" `gc`): removes run trees whose every run is terminal (or unreadable, and served by no process) and ended before
 * `now - olderThanMs`, with all their files. Listing reconciles first, so a run whose runner died becomes terminal
 * now and is kept for the whole retention period. An active run is never removed: each tree is checked again under
 * its root's run lock, then renamed out of `runs/` at once (the id stops resolving) and deleted.
 */
export async function collectGarbage(ctx: ManagerContext, o: { olderThanMs: number; dryRun: boolean; now?: number; branches?: boolean }): Promise<GcReport> {
  const now = o.now ?? Date.now();
  const cutoff = now - o.olderThanMs;
  const trees = new Map<string, RunMeta[]>();
  const all = listAll(ctx);
  const ids = new Set(all.map((m) => m.runId));
  for (const m of all) {
    // A nested run whose root is gone is a tree of its own.
    const root = ids.has(m.rootRunId) ? m.rootRunId : m.runId;
    trees.set(root, [...(trees.get(root) ?? []), m]);
  }
  const report: GcReport = { cutoff: new Date(cutoff).toISOString(), removed: [], keptActive: 0, keptRecent: 0, bytesFreed: 0, dryRun: o.dryRun, worktreesRemoved: 0, branchesDeleted: 0 };
  // Worktrees left by runs that ended (whatever their age): stale the moment their run ended. Branches stay.
  if (!o.dryRun) {
    report.worktreesRemoved = await removeEndedRunsWorktrees(ctx, async (id) => {
      // A runner still serving its run after the run's end is removing them itself; a warm runner that went back to
      // the pool has finished with them (docs/architecture.md, "Warm runners").
      try { const s = await freshStatus(ctx, id); return isTerminalRun(s.state) && !(s.runner && servesRun(s.runner, ctx.store.paths(id).dir)); } catch { return !safeRecord(ctx, id); }
    });
  }
  for (const [root, members] of trees) {
    let active = false;
    let latest = 0;
    for (const m of members) {
      let s: RunStatus | null = null;
      try { s = await freshStatus(ctx, m.runId); } catch { s = null; }
      if (s ? !isTerminalRun(s.state) : unreadableButServed(ctx, m.runId)) { active = true; break; }
      latest = Math.max(latest, endOf(ctx, m.runId, s));
    }
    if (active) { report.keptActive++; continue; }
    if (!(latest <= cutoff)) { report.keptRecent++; continue; }
    const runIds = members.map((m) => m.runId);
    const candidate: GcCandidate = {
      rootRunId: root, runIds, endedAt: new Date(latest).toISOString(),
      dismissed: ctx.store.isDismissed(root), bytes: runIds.reduce((n, id) => n + diskBytes(ctx.store.paths(id).dir), 0),
    };
    // Branches are the user's work: deleted only when asked (`gc --branches`), and only those of runs removed here.
    const branches = o.branches ? await branchesOfRuns(ctx, runIds) : [];
    if (o.dryRun) { report.removed.push(candidate); report.bytesFreed += candidate.bytes; report.branchesDeleted += branches.length; continue; }
    const moved = await removeTree(ctx, root, runIds);
    if (moved) { report.removed.push(candidate); report.bytesFreed += candidate.bytes; report.branchesDeleted += await deleteBranches(ctx, branches); } else report.keptActive++;
  }
  // Runs whose record is damaged (not in any tree: their tree is in the record), by when their directory last changed.
  for (const d of damagedRecords(ctx)) {
    if (unreadableButServed(ctx, d.runId)) { report.keptActive++; continue; }
    if (!(d.changedAt <= cutoff)) { report.keptRecent++; continue; }
    const candidate: GcCandidate = {
      rootRunId: d.runId, runIds: [d.runId], endedAt: new Date(d.changedAt).toISOString(),
      dismissed: ctx.store.isDismissed(d.runId), bytes: diskBytes(ctx.store.paths(d.runId).dir),
    };
    if (o.dryRun || await removeTree(ctx, d.runId, [d.runId])) { report.removed.push(candidate); report.bytesFreed += candidate.bytes; } else report.keptActive++;
  }
  if (!o.dryRun) removeLeftoverTrash(ctx);
  return report;
}

/** Re-checks every run of the tree under the root's lock, then moves them out of runs/ and deletes them. */
async function removeTree(ctx: ManagerContext, root: string, runIds: string[]): Promise<boolean> {
  const trash: string[] = [];
  const ok = await ctx.store.withRunLock(root, () => {
    for (const id of runIds) {
      try {
        const s = ctx.store.readStatus(id);
        if (s && !isTerminalRun(s.state)) return false;
      } catch {
        if (unreadableButServed(ctx, id)) return false;
      }
    }
    for (const id of runIds) {
      const dir = ctx.store.paths(id).dir;
      try {
        if (!fs.lstatSync(dir).isDirectory()) continue;
        const to = path.join(ctx.layout.runsDir, `.gc-${id}-${randomBytes(4).toString('hex')}`);
        fs.renameSync(dir, to);
        trash.push(to);
      } catch { /* already gone */ }
    }
    return true;
  }).catch(() => false);
  for (const t of trash) fs.rmSync(t, { recursive: true, force: true });
  return ok;
}

/** Directories a gc that was interrupted left behind (already out of runs/ by name). */
function removeLeftoverTrash(ctx: ManagerContext): void {
  let names: string[] = [];
  try { names = fs.readdirSync(ctx.layout.runsDir); } catch { return; }
  for (const n of names) if (n.startsWith('.gc-')) fs.rmSync(path.join(ctx.layout.runsDir, n), { recursive: true, force: true });
}

/**
 * A run whose status cannot be read (torn by hand, or a disk that filled) may still be running: its runner rewrites the
 * status at its next change. Such a run is removable only when no process serves it (no runner's command line names
 * its directory); where processes cannot be listed it is kept.
 */
function unreadableButServed(ctx: ManagerContext, runId: string): boolean {
  return someProcessServes(ctx.store.paths(runId).dir) !== false;
}

function safeRecord(ctx: ManagerContext, runId: string): unknown {
  try { return ctx.store.readRecord(runId); } catch { return null; }
}
