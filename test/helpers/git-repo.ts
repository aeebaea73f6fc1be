import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

/** Git for tests: a fixed identity, no user or system config, no GIT_* of the caller's environment. */
export function gitIn(cwd: string, args: string[], o: { input?: string } = {}): string {
  const env: Record<string, string> = {};
  for (const [k, v] of Object.entries(process.env)) if (v !== undefined && !k.startsWith('GIT_')) env[k] = v;
  Object.assign(env, {
    GIT_AUTHOR_NAME: 'Test User', GIT_AUTHOR_EMAIL: 'test@example.com', GIT_COMMITTER_NAME: 'Test User',
    GIT_COMMITTER_EMAIL: 'test@example.com', GIT_OPTIONAL_LOCKS: '0', GIT_CONFIG_NOSYSTEM: '1', GIT_CONFIG_GLOBAL: '/dev/null', LC_ALL: 'C',
  });
  return execFileSync('git', ['-c', 'init.defaultBranch=main', '-c', 'protocol.file.allow=always', ...args], { cwd, env, encoding: 'utf8', input: o.input, stdio: ['pipe', 'pipe', 'pipe'] }).trimEnd();
}

/**
 * A repository with a few commits at `dir`: `README.md`, `src/app.txt` (10 lines), `src/old.txt`, `docs/guide.md`,
 * a `.gitignore` that ignores `*.log`. Returns the sha of HEAD.
 */
export function makeRepo(dir: string, o: { extraFiles?: number } = {}): string {
  fs.mkdirSync(path.join(dir, 'src'), { recursive: true });
  fs.mkdirSync(path.join(dir, 'docs'), { recursive: true });
  gitIn(dir, ['init', '-q']);
  fs.writeFileSync(path.join(dir, 'README.md'), '# test repo\n');
  fs.writeFileSync(path.join(dir, '.gitignore'), '*.log\n');
  gitIn(dir, ['add', '-A']);
  gitIn(dir, ['commit', '-qm', 'first']);
  fs.writeFileSync(path.join(dir, 'src', 'app.txt'), Array.from({ length: 10 }, (_, i) => `line ${i}`).join('\n') + '\n');
  fs.writeFileSync(path.join(dir, 'src', 'old.txt'), 'old\n');
  fs.writeFileSync(path.join(dir, 'docs', 'guide.md'), 'guide\n');
  for (let i = 0; i < (o.extraFiles ?? 0); i++) {
    const sub = path.join(dir, 'bulk', String(Math.floor(i / 500)));
    fs.mkdirSync(sub, { recursive: true });
    fs.writeFileSync(path.join(sub, `f${i}.txt`), `file ${i}\n`);
  }
  gitIn(dir, ['add', '-A']);
  gitIn(dir, ['commit', '-qm', 'second']);
  return gitIn(dir, ['rev-parse', 'HEAD']);
}

/** What must never change: the user's checkout as git sees it (status, including untracked files) and its index. */
export function checkoutState(dir: string): { porcelain: string; index: string } {
  const porcelain = gitIn(dir, ['status', '--porcelain=v1', '--untracked-files=all', '--ignored']);
  const indexFile = path.join(gitIn(dir, ['rev-parse', '--absolute-git-dir']), 'index');
  const index = fs.existsSync(indexFile) ? fs.readFileSync(indexFile).toString('base64') : '';
  return { porcelain, index };
}

export function branchesLike(repo: string, pattern: string): string[] {
  const out = gitIn(repo, ['for-each-ref', '--format=%(refname:short)', `refs/heads/${pattern}`]);
  return out ? out.split('\n') : [];
}

/** Files changed between two commits. */
export function changedFiles(repo: string, from: string, to: string): string[] {
  const out = gitIn(repo, ['diff', '--name-only', '--no-renames', from, to]);
  return out ? out.split('\n').sort() : [];
}

/** Paths of the repository's worktrees other than its main one. */
export function extraWorktrees(repo: string): string[] {
  const out = gitIn(repo, ['worktree', 'list', '--porcelain']);
  const paths = out.split('\n').filter((l) => l.startsWith('worktree ')).map((l) => l.slice('worktree '.length));
  return paths.slice(1);
}
