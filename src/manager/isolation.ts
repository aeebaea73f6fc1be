import { resolveBin } from '../agents/resolve-bin.js';
import { SubagentError } from '../errors.js';
import type { RunIsolation, RunStatus, StepSpec } from '../store/run-types.js';
import { hasWorktrees, runsWithWorktrees } from '../store/worktree-paths.js';
import type { ManagerContext } from './context.js';

/**
 * Worktree isolation, the server's side (docs/agents.md, "Worktree isolation"): what a launch checks and freezes,
 * and the removal of worktrees a run left behind (cancel, reconciliation, gc). The git code is loaded only when a
 * run uses isolation: most launches never pay for it.
 */

export interface IsolationInput {
  isolation?: 'worktree';
  baseRef?: string;
}

/** Whether any static step runs isolated: the launch asked for it, or an agent file says `isolation: worktree`. */
function anyIsolated(steps: StepSpec[]): boolean {
  return steps.some((s) => (s.kind === 'agent' ? s.agent.isolation === 'worktree' : s.members.some((m) => m.agent.isolation === 'worktree')));
}

/** The git executable on the server's PATH, or AGENT_UNAVAILABLE saying what to install. */
export function requireGit(ctx: Pick<ManagerContext, 'env'>): string {
  const found = resolveBin('git', { pathEnv: ctx.env.PATH });
  if (found) return found;
  throw new SubagentError('AGENT_UNAVAILABLE', 'worktree isolation needs git, which is not installed or not on the PATH this server was started with. Install git (Debian/Ubuntu: apt-get install git; Fedora: dnf install git; macOS: xcode-select --install), or launch without isolation.');
}

/**
 * Checks a launch's isolation and freezes what its runner needs: null when no step is isolated. Refusals:
 * `AGENT_UNAVAILABLE` without git; `INVALID_INPUT` naming the path for a cwd outside a working tree (no repository,
 * a bare one, inside `.git`), a repository without any commit, or a `baseRef` that names no commit.
 */
export async function resolveIsolation(ctx: ManagerContext, cwd: string, input: IsolationInput, steps: StepSpec[]): Promise<RunIsolation | null> {
  const wanted = input.isolation === 'worktree' || anyIsolated(steps);
  if (!wanted) {
    if (input.baseRef !== undefined) throw new SubagentError('INVALID_INPUT', 'baseRef applies to isolated runs only: add isolation: "worktree", or use agents whose files say isolation: worktree.');
    return null;
  }
  const baseRef = input.baseRef ?? null;
  // A ref starting with `-` would be read as an option; control characters are in no ref.
  if (baseRef !== null && (baseRef.startsWith('-') || /[\x00-\x20\x7f]/.test(baseRef))) {
    throw new SubagentError('INVALID_INPUT', `baseRef ${JSON.stringify(baseRef.slice(0, 100))} is not a git revision; give a branch, tag or commit (e.g. "main", "v1.2", a sha).`);
  }
  const gitBin = requireGit(ctx);
  const wt = await import('../lifecycle/worktree.js');
  let repo;
  try {
    repo = await wt.repoOf(cwd, gitBin);
  } catch (e) {
    if (e instanceof wt.NotIsolatable) throw new SubagentError('INVALID_INPUT', e.message);
    throw new SubagentError('INVALID_INPUT', `${cwd}: git could not inspect it (${(e as Error).message.slice(0, 200)}); launch without isolation, or fix the repository.`);
  }
  const baseCommit = await wt.resolveCommit(repo.toplevel, baseRef ?? 'HEAD', gitBin).catch(() => null);
  if (baseCommit === null) {
    throw new SubagentError('INVALID_INPUT', baseRef === null
      ? `the repository at ${repo.toplevel} has no commit yet (HEAD names none), and an isolated step starts from a commit; commit once, or give baseRef.`
      : `baseRef ${JSON.stringify(baseRef.slice(0, 100))} names no commit in the repository at ${repo.toplevel}; give an existing branch, tag or commit.`);
  }
  return {
    scope: input.isolation === 'worktree' ? 'all' : 'agents',
    git: gitBin, repo: repo.toplevel, commonDir: repo.commonDir, cwdRel: repo.cwdRel, baseRef, baseCommit,
  };
}

/** Removes what is left of a run's worktrees (its branches stay); a no-op, without loading git code, when none is. */
export async function removeStaleWorktrees(ctx: Pick<ManagerContext, 'layout'>, runId: string): Promise<number> {
  if (!hasWorktrees(ctx.layout.home, runId)) return 0;
  const wt = await import('../lifecycle/worktree.js');
  // Its runner is gone (lost, or cut short at the run's end): what an agent left uncommitted is committed on its
  // step's branch before the worktree goes (a step that reached its end was committed already: nothing to add).
  return wt.removeRunWorktrees(ctx.layout.home, runId, { commitFirst: `subagents: run ${runId}: what a step left when its runner ended before the step did` }).catch(() => 0);
}

/** Every run's leftover worktrees whose run has ended (or is gone): what `gc` sweeps. */
export async function removeEndedRunsWorktrees(ctx: ManagerContext, isEnded: (runId: string) => Promise<boolean>): Promise<number> {
  let n = 0;
  for (const runId of runsWithWorktrees(ctx.layout.home)) if (await isEnded(runId)) n += await removeStaleWorktrees(ctx, runId);
  return n;
}

/** The branches a run's isolated steps made, with their repositories. */
export function runBranches(status: RunStatus | null): Array<{ repo: string; branch: string }> {
  const out: Array<{ repo: string; branch: string }> = [];
  for (const st of status?.steps ?? []) {
    for (const s of [st, ...(st.members ?? [])]) if (s.changes) out.push({ repo: s.changes.repo, branch: s.changes.branch });
  }
  return out;
}

/**
 * The branches of runs about to be removed (`gc --branches`): those their statuses record, and every
 * `subagents/<runId>/…` branch in the repositories the runs isolated steps in (their records, and the recorded
 * branches'): a step stopped before its end or whose runner died made its branch without recording it.
 */
export async function branchesOfRuns(ctx: ManagerContext, runIds: string[]): Promise<Array<{ repo: string; branch: string }>> {
  const out = new Map<string, { repo: string; branch: string }>();
  const add = (b: { repo: string; branch: string }) => out.set(`${b.repo}\0${b.branch}`, b);
  const gitBin = resolveBin('git', { pathEnv: ctx.env.PATH });
  const wt = gitBin ? await import('../lifecycle/worktree.js') : null;
  for (const id of runIds) {
    const recorded = (() => { try { return runBranches(ctx.store.readStatus(id)); } catch { return []; } })();
    recorded.forEach(add);
    if (!wt || !gitBin) continue;
    const repos = new Set(recorded.map((b) => b.repo));
    try { const iso = ctx.store.readRecord(id)?.isolation; if (iso) repos.add(iso.repo); } catch { /* damaged: the recorded ones */ }
    for (const repo of repos) for (const branch of await wt.runBranchesIn(repo, id, gitBin)) add({ repo, branch });
  }
  return [...out.values()];
}

/** `gc --branches`: deletes the given branches; returns how many were. */
export async function deleteBranches(ctx: Pick<ManagerContext, 'env'>, branches: Array<{ repo: string; branch: string }>): Promise<number> {
  if (branches.length === 0) return 0;
  const gitBin = resolveBin('git', { pathEnv: ctx.env.PATH });
  if (!gitBin) return 0;
  const wt = await import('../lifecycle/worktree.js');
  let n = 0;
  for (const b of branches) if (await wt.deleteBranch(b.repo, b.branch, gitBin)) n++;
  return n;
}
