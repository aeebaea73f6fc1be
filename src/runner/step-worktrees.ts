import fs from 'node:fs';
import path from 'node:path';
import type { Layout, RunPaths } from '../store/layout.js';
import type { AgentTaskSpec, RunIsolation, RunRecord, StepStatus } from '../store/run-types.js';
import { stepBranch, stepWorktreeDir, stepWorktreeMarker, type WorktreeMarker } from '../store/worktree-paths.js';

type WorktreeModule = typeof import('../lifecycle/worktree.js');

/** A step's worktree while its agent runs. */
export interface StepWorktree {
  dir: string;
  /** Where the agent starts: the cwd's place inside the worktree. */
  cwd: string;
  branch: string;
  base: string;
  marker: WorktreeMarker;
  markerFile: string;
}

/** Files named in `{previous}`'s change summary, at most. */
const SUMMARY_FILES = 20;

/**
 * The runner's side of worktree isolation (docs/agents.md, "Worktree isolation"): each isolated step and group
 * member gets a worktree on its own branch before its agent starts, and its work is committed, measured and the
 * worktree removed when it ends. A chain's tip moves with each isolated single step, so the next step starts from
 * the previous step's branch; a parallel group's members all start from the tip and leave it where it was.
 * The git code is loaded at the first isolated step: a run without one never loads it.
 */
export class StepWorktrees {
  private mod: WorktreeModule | null = null;
  private iso: RunIsolation | null;
  private tip: string | null;
  private readonly fileLists = new Map<string, Array<{ path: string; insertions: number; deletions: number }>>();
  private readonly live = new Map<string, StepWorktree>();

  constructor(private readonly record: RunRecord, private readonly layout: Layout, private readonly paths: RunPaths) {
    this.iso = record.isolation ?? null;
    this.tip = this.iso?.baseCommit ?? null;
  }

  isIsolated(spec: AgentTaskSpec): boolean {
    return this.record.isolation?.scope === 'all' || spec.agent.isolation === 'worktree';
  }

  private async load(): Promise<WorktreeModule> {
    if (this.mod === null) {
      this.mod = await import('../lifecycle/worktree.js');
      (await import('../process/git.js')).setGitUmask(this.record.umask);
    }
    return this.mod;
  }

  /**
   * The repository, when the launch did not resolve it (a step appended later with an isolated agent): the run's cwd
   * and its HEAD now.
   */
  private async isolation(wt: WorktreeModule): Promise<RunIsolation> {
    if (this.iso) return this.iso;
    const { resolveBin } = await import('../agents/resolve-bin.js');
    const gitBin = resolveBin('git');
    if (!gitBin) throw new Error('git is not installed or not on PATH; install git to run isolated steps');
    const repo = await wt.repoOf(this.record.cwd, gitBin);
    const head = await wt.resolveCommit(repo.toplevel, 'HEAD', gitBin);
    if (!head) throw new Error(`the repository at ${repo.toplevel} has no commit to start from`);
    this.iso = { scope: 'agents', git: gitBin, repo: repo.toplevel, commonDir: repo.commonDir, cwdRel: repo.cwdRel, baseRef: null, baseCommit: head };
    this.tip ??= head;
    return this.iso;
  }

  /** Makes the step's worktree; throws with a message for the step's error when it cannot. */
  async prepare(st: StepStatus, signal: AbortSignal): Promise<StepWorktree> {
    const wt = await this.load();
    const iso = await this.isolation(wt);
    const base = this.tip ?? iso.baseCommit;
    const home = this.layout.home;
    const dir = stepWorktreeDir(home, this.record.runId, st.key);
    const branch = stepBranch(this.record.runId, st.key);
    const markerFile = stepWorktreeMarker(home, this.record.runId, st.key);
    await wt.addWorktree({
      home, runId: this.record.runId, stepKey: st.key, gitBin: iso.git, dir, marker: markerFile, branch, base, signal,
      repo: { toplevel: iso.repo, commonDir: iso.commonDir, cwdRel: iso.cwdRel },
    });
    const cwd = path.join(dir, iso.cwdRel);
    // The cwd may be a directory the base commit does not have (untracked in the user's checkout): made empty.
    fs.mkdirSync(cwd, { recursive: true });
    const w: StepWorktree = { dir, cwd, branch, base, markerFile, marker: { repo: iso.repo, dir, branch, git: iso.git } };
    this.live.set(st.key, w);
    return w;
  }

  /**
   * Commits everything the agent left, records `changes` and the patch, and removes the worktree unless told to
   * leave it for the run's end (the branch stays).
   * Returns null, or why the work could not be committed (the step then fails; its worktree is removed at the run's end).
   */
  async finish(st: StepStatus, w: StepWorktree, o: { removeNow: boolean }): Promise<string | null> {
    const wt = await this.load();
    const iso = this.iso!;
    try {
      const commit = await wt.commitAll(w.dir, w.branch, `subagents: run ${this.record.runId} step ${st.key} (${st.agent})`, iso.git);
      const stats = await wt.changeStats(w.dir, w.base, commit, iso.git);
      st.changes = { branch: w.branch, commit, base: w.base, files: stats.files, insertions: stats.insertions, deletions: stats.deletions, repo: iso.repo };
      this.fileLists.set(st.key, stats.list.slice(0, SUMMARY_FILES));
      try {
        await wt.writePatch(w.dir, w.base, commit, this.paths.patch(st.key), iso.git);
      } catch { /* the counts stand; the patch resource is then empty */ }
      // A top-level step moves the chain's tip; a group member does not (its siblings' branches are parallel).
      if (!st.key.includes('.')) this.tip = commit;
    } catch (e) {
      return `its changes could not be committed to ${w.branch} (${(e as Error).message.slice(0, 300)})`;
    }
    if (!o.removeNow) return null;
    await wt.removeWorktree(w.marker).catch(() => {});
    fs.rmSync(w.markerFile, { force: true });
    this.live.delete(st.key);
    return null;
  }

  /** The change summary `{previous}` gets in an isolated chain: branch, commit and counts, and the first files. */
  summary(prev: StepStatus | undefined): string {
    if (!prev) return '';
    const each = prev.members ? prev.members : [prev];
    const lines: string[] = [];
    for (const s of each) {
      const c = s.changes;
      if (!c) continue;
      const who = prev.members ? `${s.agent} #${s.index}` : s.agent;
      lines.push(`- ${who}: branch ${c.branch} (commit ${c.commit.slice(0, 12)} from ${c.base.slice(0, 12)}): ${c.files} file${c.files === 1 ? '' : 's'} changed, +${c.insertions} -${c.deletions}`);
      const files = this.fileLists.get(s.key) ?? [];
      // A file name is the agent's text: one with a control character (a newline could forge a line of this summary) or
      // a quote is shown as a JSON string.
      for (const f of files) lines.push(`  ${/[\x00-\x1f\x7f"]/.test(f.path) ? JSON.stringify(f.path) : f.path} (+${f.insertions} -${f.deletions})`);
      if (c.files > files.length) lines.push(`  … and ${c.files - files.length} more files`);
    }
    return lines.length ? `\n\n### Changes of the previous step\n\n${lines.join('\n')}\n` : '';
  }

  /** Removes every worktree of the run still there (the run is ending); branches stay. */
  async removeAll(): Promise<void> {
    if (this.mod === null && !fs.existsSync(path.join(this.layout.home, 'worktrees', this.record.runId))) return;
    const wt = await this.load();
    this.live.clear();
    await wt.removeRunWorktrees(this.layout.home, this.record.runId).catch(() => {});
  }
}
