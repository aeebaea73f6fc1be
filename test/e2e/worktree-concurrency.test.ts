/**
 * Worktree isolation under concurrency, and without git: two runs of 8 isolated members each, launched at the same
 * moment from two servers into one repository, must each leave exactly their own change on their own branch; a
 * server whose PATH has no git refuses isolated launches saying what to install.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { branchesLike, changedFiles, checkoutState, extraWorktrees, makeRepo } from '../helpers/git-repo.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { ok } from '../helpers/runs.js';
import { startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const EDITOR = path.join(FIXTURE_AGENTS, 'editor-agent.mjs');

describe('worktree isolation: two runs × 8 members in one repository at once', () => {
  let t: ReturnType<typeof tempStateHome>;
  let servers: Started[] = [];
  beforeAll(async () => {
    t = tempStateHome('sa-wtc-');
    writeAgent(path.join(t.home, 'agents'), 'editor', { backend: 'command', command: [process.execPath, EDITOR], isolation: 'worktree' });
    const env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_AGENTS: '16' };
    servers = await Promise.all([startServer(env), startServer(env)]);
  });
  afterAll(async () => {
    await Promise.all(servers.map((s) => s.close()));
    t?.cleanup();
  });

  it('every branch has exactly its member\'s change; no worktree is left; the checkout is untouched', async () => {
    const repo = path.join(t.root, 'repo');
    const base = makeRepo(repo);
    fs.writeFileSync(path.join(repo, 'src', 'app.txt'), 'dirty\n');
    const before = checkoutState(repo);
    const members = (r: number) => Array.from({ length: 8 }, (_, j) => ({
      agent: 'editor',
      // Every member also rewrites the same tracked file: in one checkout they would overwrite each other.
      task: JSON.stringify({ write: { [`r${r}-m${j}.txt`]: `run ${r} member ${j}\n`, 'src/app.txt': `run ${r} member ${j}\n` } }),
    }));
    const launched = await Promise.all(servers.map((s, r) => ok(s, 'launch', { tasks: members(r), concurrency: 8, cwd: 'repo' })));
    const ended = await Promise.all(launched.map((l, r) => waitTerminal(servers[r]!, l.runId, 180_000)));
    ended.forEach((fin, r) => {
      expect(fin.state).toBe('completed');
      const runId = launched[r]!.runId;
      expect(branchesLike(repo, `subagents/${runId}/*`)).toHaveLength(8);
      fin.steps.forEach((m: any, j: number) => {
        expect(m.changes).toMatchObject({ branch: `subagents/${runId}/0-${j}`, base, files: 2 });
        expect(changedFiles(repo, base, m.changes.branch)).toEqual([`r${r}-m${j}.txt`, 'src/app.txt']);
      });
      expect(fs.existsSync(path.join(t.home, 'worktrees', runId))).toBe(false);
    });
    expect(extraWorktrees(repo)).toEqual([]);
    expect(checkoutState(repo)).toEqual(before);
  });
});

describe('worktree isolation without git', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-nogit-');
    writeAgent(path.join(t.home, 'agents'), 'editor', { backend: 'command', command: [process.execPath, EDITOR] });
    // A PATH with node alone: no git anywhere on it.
    const bin = path.join(t.base, 'bin');
    fs.mkdirSync(bin);
    fs.symlinkSync(process.execPath, path.join(bin, 'node'));
    makeRepo(path.join(t.root, 'repo'));
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, PATH: bin });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  it('refuses an isolated launch AGENT_UNAVAILABLE, saying to install git; an unisolated one still runs', async () => {
    const r = await s.call('launch', { agent: 'editor', task: 'x', cwd: 'repo', isolation: 'worktree' });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^AGENT_UNAVAILABLE: worktree isolation needs git, .*Install git/);
    const l = await ok(s, 'launch', { agent: 'editor', task: 'plain', cwd: 'repo' });
    expect((await waitTerminal(s, l.runId)).state).toBe('completed');
  });
});
