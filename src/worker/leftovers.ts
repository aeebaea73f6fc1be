/**
 * What runs of this worker's home left on its machine (docs/scale-out.md, "Worktree isolation over Redis"): a
 * worktree lives where its run ran, so only this machine can remove it. A worker sweeps its home when it starts (runs
 * of a previous life whose runner died are reconciled, which stops what is left of them and removes their worktrees)
 * and removes a dismissed run's leftover worktrees when a server asks the pool; `gc --branches` asks it to delete a
 * removed run's branches likewise.
 */
import type { ManagerContext } from '../manager/context.js';
import { deleteBranches, removeEndedRunsWorktrees, removeStaleWorktrees, runBranches } from '../manager/isolation.js';
import { freshStatus } from '../manager/run-status.js';
import { Sweeper } from '../manager/sweep.js';
import { servesRun } from '../process/identity.js';
import { isTerminalRun } from '../store/run-types.js';
import { hasWorktrees } from '../store/worktree-paths.js';

/**
 * Whether nothing of the local run runs any more (its runner, were it still serving it, removes its worktrees itself;
 * a warm runner back in the pool after the run serves it no more: docs/architecture.md, "Warm runners").
 */
async function ended(local: ManagerContext, runId: string): Promise<boolean> {
  try {
    const s = await freshStatus(local, runId);
    return isTerminalRun(s.state) && !(s.runner && servesRun(s.runner, local.store.paths(runId).dir));
  } catch {
    return false;
  }
}

/** At the worker's start: reconciles its home's runs, then removes every ended run's worktrees. Returns how many. */
export async function sweepHome(local: ManagerContext): Promise<number> {
  await new Sweeper(local).sweepOnce();
  return removeEndedRunsWorktrees(local, (id) => ended(local, id));
}

/** A dismissed run's worktrees, if this home has any and the run has ended here. Returns how many were removed. */
export async function removeRunLeftovers(local: ManagerContext, runId: string): Promise<number> {
  if (!hasWorktrees(local.layout.home, runId) || !(await ended(local, runId))) return 0;
  return removeStaleWorktrees(local, runId);
}

/** `gc --branches` over Redis: the branches this machine's copy of the run made, deleted. Returns how many were. */
export async function deleteRunBranches(local: ManagerContext, runId: string): Promise<number> {
  if (!(await ended(local, runId))) return 0;
  let status = null;
  try { status = local.store.readStatus(runId); } catch { return 0; }
  return deleteBranches(local, runBranches(status));
}
