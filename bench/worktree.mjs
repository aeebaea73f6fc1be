// Worktree isolation: what an isolated step costs on top of its agent, on a repository of ~10 000 files.
// Measured: the runner's own mechanism per step (dist/lifecycle/worktree.js): worktree made (per-repository lock,
// `worktree add --no-checkout`, checkout), one file edited, everything committed, change counts and the patch
// written, worktree removed. Baseline, in the same run and interleaved with it: a plain `git worktree add -b` +
// `git worktree remove` through the same one-shot git helper. Target: ratio ≤ 1.3.
// A second figure: a whole isolated single run (launch → terminal, a no-op agent) against the same run unisolated.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { note, now, REPO, report, runBench, scaled, serverEnv, startServer, stats, tempHome, writeAgent } from './lib.mjs';

const FILES = Number(process.env.BENCH_WORKTREE_FILES) || 10_000;
const { git } = await import(pathToFileURL(path.join(REPO, 'dist', 'process', 'git.js')).href);
const wt = await import(pathToFileURL(path.join(REPO, 'dist', 'lifecycle', 'worktree.js')).href);
const paths = await import(pathToFileURL(path.join(REPO, 'dist', 'store', 'worktree-paths.js')).href);

function makeRepo(dir) {
  const env = { ...process.env, GIT_AUTHOR_NAME: 'b', GIT_AUTHOR_EMAIL: 'b@b', GIT_COMMITTER_NAME: 'b', GIT_COMMITTER_EMAIL: 'b@b' };
  const g = (args) => execFileSync('git', args, { cwd: dir, env, stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8' }).trim();
  fs.mkdirSync(dir, { recursive: true });
  g(['init', '-q']);
  for (let i = 0; i < FILES; i++) {
    const sub = path.join(dir, 'src', String(Math.floor(i / 200)));
    if (i % 200 === 0) fs.mkdirSync(sub, { recursive: true });
    fs.writeFileSync(path.join(sub, `f${i}.ts`), `export const v${i} = ${i};\n// ${'x'.repeat(i % 300)}\n`);
  }
  g(['add', '-A']);
  g(['commit', '-qm', 'bulk']);
  return g(['rev-parse', 'HEAD']);
}

runBench(async () => {
  const h = tempHome('sa-bench-wt-');
  const gitBin = execFileSync('/bin/sh', ['-c', 'command -v git'], { encoding: 'utf8' }).trim();
  try {
    const repo = path.join(h.root, 'repo');
    const base = makeRepo(repo);
    const info = await wt.repoOf(repo, gitBin);
    const ours = [];
    const plain = [];
    const n = scaled(5);
    for (let i = 0; i <= n; i++) {
      // Interleaved, so that drift of the shared machine colours both sides alike; the first round warms caches.
      const runId = `r-${String(i).padStart(24, 'A')}`;
      const dir = paths.stepWorktreeDir(h.home, runId, '0');
      let t0 = now();
      await wt.addWorktree({ home: h.home, runId, stepKey: '0', repo: info, gitBin, dir, marker: paths.stepWorktreeMarker(h.home, runId, '0'), branch: paths.stepBranch(runId, '0'), base });
      fs.writeFileSync(path.join(dir, 'src', '0', 'f0.ts'), 'export const v0 = 42;\n');
      const commit = await wt.commitAll(dir, 'bench', gitBin);
      await wt.changeStats(dir, base, commit, gitBin);
      await wt.writePatch(dir, base, commit, path.join(h.base, `p${i}.patch`), gitBin);
      await wt.removeRunWorktrees(h.home, runId);
      const a = now() - t0;
      const pdir = path.join(h.base, `plain-${i}`);
      t0 = now();
      await git(['worktree', 'add', '-q', '-b', `plain/${i}`, pdir, base], { cwd: repo, git: gitBin, timeoutMs: 120_000 });
      fs.writeFileSync(path.join(pdir, 'src', '0', 'f0.ts'), 'export const v0 = 42;\n');
      await git(['worktree', 'remove', '--force', pdir], { cwd: repo, git: gitBin, timeoutMs: 120_000 });
      const b = now() - t0;
      if (i > 0) { ours.push(a); plain.push(b); }
    }
    const floor = stats(plain);
    report('isolated step: worktree setup + commit + teardown', ours, floor, { note: `${FILES} files; floor = plain git worktree add + remove in the same run; target ratio ≤ 1.3` });

    // The same through a server and a runner: a no-op agent, isolated and not.
    writeAgent(h.home, 'noop', { backend: 'command', command: ['true'] });
    const s = await startServer(serverEnv(h));
    try {
      const run = async (args) => {
        const t0 = now();
        const { runId } = (await s.call('launch', { agent: 'noop', task: 'x', cwd: 'repo', ...args })).structuredContent;
        for (;;) {
          const st = (await s.call('status', { runId, waitMs: 20_000, until: 'terminal' })).structuredContent;
          if (['completed', 'failed', 'cancelled'].includes(st.state)) return now() - t0;
        }
      };
      const iso = [];
      const bare = [];
      for (let i = 0; i <= scaled(3); i++) {
        const a = await run({ isolation: 'worktree' });
        const b = await run({});
        if (i > 0) { iso.push(a); bare.push(b); }
      }
      const bareStats = stats(bare);
      const isoStats = stats(iso);
      report('isolated single run (launch → terminal, no-op agent)', iso, bareStats, { note: 'floor = the same run unisolated' });
      note(`isolation adds ${(isoStats.median - bareStats.median).toFixed(0)} ms per run here; plain worktree add + remove alone: ${floor.median.toFixed(0)} ms`);
    } finally {
      await s.close();
    }
  } finally {
    h.cleanup();
  }
});
