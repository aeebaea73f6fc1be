/**
 * The worktree mechanism against real git repositories in temp dirs: one-shot git commands and their failures,
 * which directories can be isolated, worktrees made, committed, measured and removed — and the user's checkout
 * unchanged throughout.
 */
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { git, GitError } from '../../src/process/git.js';
import {
  addWorktree, changeStats, commitAll, removeRunWorktrees, removeWorktree, repoOf, resolveCommit, NotIsolatable,
} from '../../src/lifecycle/worktree.js';
import { stepBranch, stepWorktreeDir, stepWorktreeMarker } from '../../src/store/worktree-paths.js';
import { branchesLike, changedFiles, checkoutState, extraWorktrees, gitIn, makeRepo } from '../helpers/git-repo.js';
import { tempStateHome } from '../helpers/state-home.js';

const GIT = execFileSync('/bin/sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim();
const RUN = 'r-AAAAAAAAAAAAAAAAAAAAAAAA';

describe('git: one-shot commands', () => {
  it('a missing executable, a failure and a timeout are each a GitError saying which', async () => {
    const missing = await git(['--version'], { cwd: '/', timeoutMs: 5000, git: '/nonexistent/git' }).catch((e: unknown) => e);
    expect(missing).toBeInstanceOf(GitError);
    expect((missing as GitError).failure).toBe('missing');
    const failed = await git(['rev-parse', '--verify', 'no-such-ref'], { cwd: '/', timeoutMs: 5000, git: GIT }).catch((e: unknown) => e);
    expect((failed as GitError).failure).toBe('failed');
    expect((failed as GitError).message).toMatch(/^git rev-parse failed: fatal: /);
    // A git that hangs (a stand-in script) is stopped at its time limit.
    const t = tempStateHome('sa-git-hang-');
    try {
      const hung = path.join(t.base, 'git');
      fs.writeFileSync(hung, '#!/bin/sh\nexec sleep 30\n', { mode: 0o755 });
      const slow = await git(['status'], { cwd: '/', timeoutMs: 200, git: hung }).catch((e: unknown) => e);
      expect((slow as GitError).failure).toBe('timeout');
      expect((slow as GitError).message).toBe('git status did not finish within 200 ms');
    } finally {
      t.cleanup();
    }
  });
  it('never sees the caller\'s GIT_DIR (it would point at another repository)', async () => {
    const t = tempStateHome('sa-git-env-');
    try {
      const repo = path.join(t.root, 'r');
      const head = makeRepo(repo);
      process.env.GIT_DIR = '/nonexistent';
      try {
        expect((await git(['rev-parse', 'HEAD'], { cwd: repo, timeoutMs: 10_000, git: GIT })).stdout).toBe(head);
      } finally {
        delete process.env.GIT_DIR;
      }
    } finally {
      t.cleanup();
    }
  });
});

describe('worktrees', () => {
  let t: ReturnType<typeof tempStateHome>;
  let repo: string;
  let base: string;
  let before: ReturnType<typeof checkoutState>;
  beforeAll(() => {
    t = tempStateHome('sa-worktree-');
    repo = path.join(t.root, 'repo');
    base = makeRepo(repo);
    fs.writeFileSync(path.join(repo, 'untracked.txt'), 'mine\n');
    before = checkoutState(repo);
  });
  afterAll(() => t?.cleanup());

  it('repoOf: the top level, the shared git dir and the cwd\'s place; refusals name the path', async () => {
    const r = await repoOf(path.join(repo, 'src'), GIT);
    expect(r).toEqual({ toplevel: repo, commonDir: path.join(repo, '.git'), cwdRel: 'src' });
    await expect(repoOf(t.home, GIT)).rejects.toThrow(new RegExp(`^${t.home} is not inside a git repository`));
    await expect(repoOf(path.join(repo, '.git'), GIT)).rejects.toBeInstanceOf(NotIsolatable);
    gitIn(t.root, ['init', '-q', '--bare', 'b.git']);
    await expect(repoOf(path.join(t.root, 'b.git'), GIT)).rejects.toThrow(/is a bare git repository/);
    expect(await resolveCommit(repo, 'HEAD', GIT)).toBe(base);
    expect(await resolveCommit(repo, 'nope', GIT)).toBeNull();
    expect(checkoutState(repo)).toEqual(before);
  });

  it('add → edit → commit → stats → remove: the branch keeps the work, the checkout is untouched', async () => {
    const key = '0';
    const dir = stepWorktreeDir(t.home, RUN, key);
    const branch = stepBranch(RUN, key);
    const info = await repoOf(repo, GIT);
    await addWorktree({ home: t.home, runId: RUN, stepKey: key, repo: info, gitBin: GIT, dir, marker: stepWorktreeMarker(t.home, RUN, key), branch, base });
    expect(fs.readFileSync(path.join(dir, 'src', 'app.txt'), 'utf8')).toContain('line 9');
    expect(fs.existsSync(path.join(dir, 'untracked.txt'))).toBe(false);
    // Nothing changed: the branch stays at the base and no commit is made.
    expect(await commitAll(dir, branch, 'nothing', GIT)).toBe(base);
    fs.writeFileSync(path.join(dir, 'src', 'app.txt'), 'rewritten\n');
    fs.writeFileSync(path.join(dir, 'image.bin'), Buffer.from([0, 1, 2, 0, 255]));
    fs.writeFileSync(path.join(dir, 'trace.log'), 'ignored by .gitignore\n');
    const commit = await commitAll(dir, branch, 'work', GIT);
    expect(commit).not.toBe(base);
    const stats = await changeStats(dir, base, commit, GIT);
    expect(stats).toMatchObject({ files: 2, insertions: 1, deletions: 10 });
    expect(stats.list.map((f) => f.path).sort()).toEqual(['image.bin', 'src/app.txt']);
    expect(changedFiles(repo, base, branch)).toEqual(['image.bin', 'src/app.txt']);
    await removeWorktree({ repo, dir, branch, git: GIT });
    expect(fs.existsSync(dir)).toBe(false);
    expect(extraWorktrees(repo)).toEqual([]);
    expect(branchesLike(repo, `subagents/${RUN}/*`)).toEqual([branch]);
    expect(checkoutState(repo)).toEqual(before);
  });

  it('16 worktrees added at once in one repository all succeed (the per-repository lock and retries)', async () => {
    const run = 'r-BBBBBBBBBBBBBBBBBBBBBBBB';
    const info = await repoOf(repo, GIT);
    const keys = Array.from({ length: 16 }, (_, j) => `1.${j}`);
    await Promise.all(keys.map((key) => addWorktree({
      home: t.home, runId: run, stepKey: key, repo: info, gitBin: GIT, dir: stepWorktreeDir(t.home, run, key),
      marker: stepWorktreeMarker(t.home, run, key), branch: stepBranch(run, key), base,
    })));
    expect(extraWorktrees(repo)).toHaveLength(16);
    expect(branchesLike(repo, `subagents/${run}/*`)).toHaveLength(16);
    // The sweep a crashed run gets: every worktree removed through its marker, even when one's repository is gone.
    expect(await removeRunWorktrees(t.home, run)).toBe(16);
    expect(extraWorktrees(repo)).toEqual([]);
    expect(fs.existsSync(path.join(t.home, 'worktrees', run))).toBe(false);
    expect(checkoutState(repo)).toEqual(before);
  });

  it('a worktree whose repository was deleted is still removed (its directory), without an error', async () => {
    const gone = path.join(t.root, 'gone');
    const gbase = makeRepo(gone);
    const run = 'r-CCCCCCCCCCCCCCCCCCCCCCCC';
    const info = await repoOf(gone, GIT);
    const dir = stepWorktreeDir(t.home, run, '0');
    await addWorktree({ home: t.home, runId: run, stepKey: '0', repo: info, gitBin: GIT, dir, marker: stepWorktreeMarker(t.home, run, '0'), branch: stepBranch(run, '0'), base: gbase });
    fs.rmSync(gone, { recursive: true, force: true });
    expect(await removeRunWorktrees(t.home, run)).toBe(1);
    expect(fs.existsSync(dir)).toBe(false);
  });
});
