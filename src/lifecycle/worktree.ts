import fs from 'node:fs';
import path from 'node:path';
import { createHash } from 'node:crypto';
import { ensurePrivateDir, writeFileAtomic } from '../store/atomic-write.js';
import { withLock } from '../store/lock.js';
import { readJsonFile } from '../store/json-file.js';
import { runWorktreesDir, type WorktreeMarker } from '../store/worktree-paths.js';
import { git, GitError, type GitOptions } from '../process/git.js';

/**
 * Git worktrees for isolated steps: made from a base commit on a branch of their own, committed when the step ends,
 * measured, and removed. Every command runs with a time limit; the user's working tree and index are never touched
 * (commands run in the worktree, or are `git worktree` / `branch` / `diff` / `rev-parse` in the repository).
 */

const SETUP_TIMEOUT_MS = 120_000;
const QUICK_TIMEOUT_MS = 30_000;

/** Author and committer of the commit that ends an isolated step. */
export const COMMIT_IDENTITY = {
  GIT_AUTHOR_NAME: 'subagents-mcp', GIT_AUTHOR_EMAIL: 'subagents-mcp@localhost',
  GIT_COMMITTER_NAME: 'subagents-mcp', GIT_COMMITTER_EMAIL: 'subagents-mcp@localhost',
};

export interface RepoInfo {
  /** The working tree's top level, as git reports it (a real path). */
  toplevel: string;
  /** The shared git directory (`.git` of the main worktree): what the per-repository lock is keyed on. */
  commonDir: string;
  /** The cwd relative to the top level ('' at the top). */
  cwdRel: string;
}

/** Why a directory cannot be isolated; the message names the path and what to do. */
export class NotIsolatable extends Error {}

/** The repository `cwd` is in. Refuses a directory outside any repository, a bare repository and a `.git` directory. */
export async function repoOf(cwd: string, gitBin: string): Promise<RepoInfo> {
  let out: string;
  try {
    out = (await git(['rev-parse', '--is-bare-repository', '--is-inside-work-tree', '--git-common-dir'], { cwd, git: gitBin, timeoutMs: QUICK_TIMEOUT_MS })).stdout;
  } catch (e) {
    if (e instanceof GitError && e.failure === 'failed') {
      const why = /not a git repository/i.test(e.stderr) ? 'is not inside a git repository' : `cannot be used as a git repository (${e.message})`;
      throw new NotIsolatable(`${cwd} ${why}; worktree isolation needs the cwd to be inside a git checkout. Launch in a checkout, or without isolation.`);
    }
    throw e;
  }
  const [bare, inside, common] = out.split('\n');
  if (bare === 'true') throw new NotIsolatable(`${cwd} is a bare git repository (it has no working tree to branch from); launch in a checkout of it, or without isolation.`);
  if (inside !== 'true') throw new NotIsolatable(`${cwd} is inside a .git directory, not a working tree; launch in the checkout itself.`);
  const toplevel = (await git(['rev-parse', '--show-toplevel'], { cwd, git: gitBin, timeoutMs: QUICK_TIMEOUT_MS })).stdout;
  const commonDir = path.resolve(cwd, common ?? '.git');
  const rel = path.relative(toplevel, fs.realpathSync(cwd));
  // Outside the top level (`..` as a whole first segment; `..data` is a directory inside it): the worktree's root.
  const outside = rel === '..' || rel.startsWith(`..${path.sep}`) || path.isAbsolute(rel);
  return { toplevel, commonDir: safeRealpath(commonDir), cwdRel: outside ? '' : rel };
}

/**
 * The commit a ref names (`HEAD`, a branch, a tag, a sha…), or null when there is none. A ref starting with `-` is
 * none (it would be read as an option; `--end-of-options` is too recent for some gits still in use).
 */
export async function resolveCommit(repo: string, ref: string, gitBin: string): Promise<string | null> {
  if (ref.startsWith('-')) return null;
  const r = await git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`], { cwd: repo, git: gitBin, timeoutMs: QUICK_TIMEOUT_MS, okExitCodes: [1, 128] });
  return r.exitCode === 0 && /^[0-9a-f]{40,64}$/.test(r.stdout) ? r.stdout : null;
}

/** The lock that serializes worktree bookkeeping in one repository across every runner of the state home. */
function repoLockTarget(home: string, commonDir: string): string {
  const locks = path.join(home, 'locks');
  ensurePrivateDir(locks);
  return path.join(locks, `git-${createHash('sha256').update(commonDir).digest('hex').slice(0, 24)}`);
}

/** Lock errors git reports when another process holds one of the repository's lock files for a moment. */
const TRANSIENT = /\.lock'?:? File exists|Unable to create .*\.lock|cannot lock ref|could not lock|Another git process/i;

async function withRetries<T>(fn: () => Promise<T>, signal?: AbortSignal): Promise<T> {
  for (let attempt = 1; ; attempt++) {
    try {
      return await fn();
    } catch (e) {
      if (!(e instanceof GitError && e.failure === 'failed' && TRANSIENT.test(e.stderr)) || attempt >= 5 || signal?.aborted) throw e;
      await new Promise((r) => setTimeout(r, 50 * attempt * attempt));
    }
  }
}

export interface AddWorktree {
  home: string;
  runId: string;
  stepKey: string;
  repo: RepoInfo;
  gitBin: string;
  dir: string;
  marker: string;
  branch: string;
  base: string;
  signal?: AbortSignal;
}

/**
 * Makes the step's worktree on a new branch at `base`. The part that touches the repository's shared bookkeeping
 * (the branch ref, `.git/worktrees/<name>`) runs under a per-repository lock, with retries on git's own lock
 * files; the checkout of the files, which writes only the new worktree and its own index, runs outside it, so
 * members of a group check out in parallel. The marker is written first: whoever cleans up later can find the
 * worktree's repository even if this process dies half-way.
 */
export async function addWorktree(a: AddWorktree): Promise<void> {
  ensurePrivateDir(path.join(a.home, 'worktrees'));
  ensurePrivateDir(path.dirname(a.dir));
  const marker: WorktreeMarker = { repo: a.repo.toplevel, dir: a.dir, branch: a.branch, git: a.gitBin };
  writeFileAtomic(a.marker, JSON.stringify(marker), { durable: false });
  await withLock(repoLockTarget(a.home, a.repo.commonDir), () => withRetries(() => git(
    ['worktree', 'add', '--no-checkout', '-b', a.branch, a.dir, a.base],
    { cwd: a.repo.toplevel, git: a.gitBin, timeoutMs: QUICK_TIMEOUT_MS, signal: a.signal },
  ), a.signal), { waitMs: 120_000, staleMs: 30_000, what: 'repository' });
  await git(['reset', '--hard', '--quiet'], { cwd: a.dir, git: a.gitBin, timeoutMs: SETUP_TIMEOUT_MS, signal: a.signal });
}

/**
 * Commits everything in the worktree (tracked changes, new and deleted files; ignored files stay out) on the step's
 * `branch` and returns the branch's tip afterwards: the agent's HEAD commit itself when nothing is left uncommitted.
 * The commit is built from the worktree's index (`write-tree`, `commit-tree`) and only `branch` is moved to it: an
 * agent that checked out another branch (one of the user's) or detached HEAD never gets our commit on that branch,
 * and what it committed itself stays in the branch's history. A nested repository the agent made (`git init` in a
 * subdirectory) cannot be added; it is left out, and everything else is still committed.
 */
export async function commitAll(dir: string, branch: string, message: string, gitBin: string): Promise<string> {
  const run = (args: string[], o: Partial<GitOptions> = {}) => git(args, { cwd: dir, git: gitBin, timeoutMs: SETUP_TIMEOUT_MS, ...o });
  const excluded: string[] = [];
  for (;;) {
    try {
      await run(['add', '--all', '--', '.', ...excluded.map((p) => `:(exclude,literal)${p}`)]);
      break;
    } catch (e) {
      // `error: 'pkg/' does not have a commit checked out`: a repository with no commit inside the worktree.
      const nested = e instanceof GitError ? /'(.+?)\/?' does not have a commit checked out/.exec(e.stderr)?.[1] : undefined;
      if (nested === undefined || excluded.includes(nested) || excluded.length >= 100) throw e;
      excluded.push(nested);
    }
  }
  const tree = (await run(['write-tree'])).stdout;
  const head = (await run(['rev-parse', '--verify', 'HEAD^{commit}'], { timeoutMs: QUICK_TIMEOUT_MS })).stdout;
  const headTree = (await run(['rev-parse', '--verify', 'HEAD^{tree}'], { timeoutMs: QUICK_TIMEOUT_MS })).stdout;
  const tip = tree === headTree ? head : (await run(['commit-tree', '--no-gpg-sign', tree, '-p', head, '-m', message], { env: COMMIT_IDENTITY })).stdout;
  await run(['update-ref', '-m', 'subagents: step end', `refs/heads/${branch}`, tip], { timeoutMs: QUICK_TIMEOUT_MS });
  return tip;
}

export interface FileChange { path: string; insertions: number; deletions: number }
export interface ChangeStats { files: number; insertions: number; deletions: number; list: FileChange[] }

/** Files and line counts from `base` to `commit` (a binary file counts as a file with no lines). */
export async function changeStats(cwd: string, base: string, commit: string, gitBin: string): Promise<ChangeStats> {
  if (base === commit) return { files: 0, insertions: 0, deletions: 0, list: [] };
  const out = (await git(['diff', '--numstat', '-z', '--no-renames', '--no-ext-diff', '--no-textconv', base, commit, '--'], { cwd, git: gitBin, timeoutMs: SETUP_TIMEOUT_MS })).stdout;
  const list: FileChange[] = [];
  for (const entry of out.split('\0')) {
    const m = /^(\d+|-)\t(\d+|-)\t([\s\S]+)$/.exec(entry);
    if (!m) continue;
    list.push({ path: m[3]!, insertions: m[1] === '-' ? 0 : Number(m[1]), deletions: m[2] === '-' ? 0 : Number(m[2]) });
  }
  return {
    files: list.length,
    insertions: list.reduce((n, f) => n + f.insertions, 0),
    deletions: list.reduce((n, f) => n + f.deletions, 0),
    list,
  };
}

/** The patch from `base` to `commit`, written to `file` (binary files named, not included). */
export async function writePatch(cwd: string, base: string, commit: string, file: string, gitBin: string): Promise<void> {
  // Made here, private and never through a symlink, before git's output is written into it.
  fs.closeSync(fs.openSync(file, fs.constants.O_CREAT | fs.constants.O_TRUNC | fs.constants.O_WRONLY | fs.constants.O_NOFOLLOW, 0o600));
  await git(['diff', '--no-color', '--no-ext-diff', '--no-textconv', base, commit, '--'], { cwd, git: gitBin, timeoutMs: SETUP_TIMEOUT_MS, stdoutFile: file });
}

/**
 * Removes one worktree: `git worktree remove` in its repository (which deletes the directory and git's record of
 * it); when that cannot be done (the repository is gone or moved), the directory is deleted and the repository's
 * stale record pruned where it still exists. The branch stays.
 */
export async function removeWorktree(m: WorktreeMarker): Promise<void> {
  try {
    await withRetries(() => git(['worktree', 'remove', '--force', '--force', m.dir], { cwd: m.repo, git: m.git, timeoutMs: SETUP_TIMEOUT_MS }));
  } catch {
    fs.rmSync(m.dir, { recursive: true, force: true, maxRetries: 3 });
    if (fs.existsSync(m.repo)) await git(['worktree', 'prune'], { cwd: m.repo, git: m.git, timeoutMs: QUICK_TIMEOUT_MS }).catch(() => {});
  }
  // The directory may have been left when git removed its own record (a file git could not delete).
  fs.rmSync(m.dir, { recursive: true, force: true, maxRetries: 3 });
}

/**
 * Every worktree left under a run (a runner that died, a step that could not clean up): each removed through its
 * marker, then the run's directory. Returns how many were removed.
 */
export async function removeRunWorktrees(home: string, runId: string, o: { commitFirst?: string } = {}): Promise<number> {
  const dir = runWorktreesDir(home, runId);
  let names: string[];
  try { names = fs.readdirSync(dir); } catch { return 0; }
  // Counted as found: a worktree directory, or a marker whose worktree was never made.
  const dirs = new Set(names.filter((n) => !n.endsWith('.json')));
  let removed = dirs.size;
  for (const name of names.filter((n) => n.endsWith('.json'))) {
    const file = path.join(dir, name);
    let m: WorktreeMarker | null = null;
    try { m = readJsonFile<WorktreeMarker>(file); } catch { m = null; }
    if (m && path.dirname(m.dir) === dir) {
      // A worktree whose step never reached its end (its runner died): what the agent left goes on its branch first.
      if (o.commitFirst !== undefined && fs.existsSync(path.join(m.dir, '.git'))) await commitAll(m.dir, m.branch, o.commitFirst, m.git).catch(() => {});
      await removeWorktree(m).catch(() => {});
      if (!dirs.has(path.basename(m.dir))) removed++;
    }
    fs.rmSync(file, { force: true });
  }
  // Anything without a marker (a half-made worktree of a runner killed before it wrote one cannot exist, but a
  // marker write that failed can): only files of ours, deleted outright.
  fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  return removed;
}

/** Deletes a branch in its repository (gc --branches); false when it could not be (gone, or the repository is). */
/**
 * Every branch a run's steps made in `repo` (`subagents/<runId>/…`), recorded in its status or not: a step stopped
 * before its end, or whose runner died, made its branch without recording it.
 */
export async function runBranchesIn(repo: string, runId: string, gitBin: string): Promise<string[]> {
  if (!fs.existsSync(repo)) return [];
  try {
    const out = (await git(['for-each-ref', '--format=%(refname:lstrip=2)', `refs/heads/subagents/${runId}/`], { cwd: repo, git: gitBin, timeoutMs: QUICK_TIMEOUT_MS })).stdout;
    return out.split('\n').filter((b) => b.startsWith(`subagents/${runId}/`));
  } catch {
    return [];
  }
}

export async function deleteBranch(repo: string, branch: string, gitBin: string): Promise<boolean> {
  if (!fs.existsSync(repo)) return false;
  try {
    await git(['branch', '--delete', '--force', '--quiet', branch], { cwd: repo, git: gitBin, timeoutMs: QUICK_TIMEOUT_MS });
    return true;
  } catch {
    return false;
  }
}

function safeRealpath(p: string): string {
  try { return fs.realpathSync(p); } catch { return p; }
}
