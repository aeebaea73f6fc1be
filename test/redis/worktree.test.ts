/**
 * Worktree isolation over Redis (docs/scale-out.md, "Worktree isolation over Redis"): a private redis-server, a real
 * server and real workers, a real git repository in a temp dir. The worker makes, commits and removes the worktrees
 * in its own home, as a local runner does; status shows the branch and counts from Redis, the patch resource reads
 * the mirrored patch; dismiss and a worker's restart remove worktrees a run left on that machine.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { branchesLike, changedFiles, checkoutState, extraWorktrees, gitIn, makeRepo } from '../helpers/git-repo.js';
import { FIXTURE_AGENTS, MAIN_JS } from '../helpers/paths.js';
import { startWorker, stopWorker, until, type WorkerProc } from '../helpers/redis-fleet.js';
import { REDIS_SERVER, startRedis, type RedisInstance } from '../helpers/redis-server.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { skipWithout } from '../helpers/system-tools.js';

const skipped = skipWithout('redis-server', REDIS_SERVER !== null);
const EDITOR = path.join(FIXTURE_AGENTS, 'editor-agent.mjs');

let redis: RedisInstance;
let t: ReturnType<typeof tempStateHome>;
let s: Started;
let worker: WorkerProc;
let repo: string;
let base: string;
let before: ReturnType<typeof checkoutState>;
const workerHome = () => path.join(t.base, 'worker-a');
const agents = (dir: string) => writeAgent(dir, 'editor', { backend: 'command', command: ['node', EDITOR] });

beforeAll(async () => {
  if (skipped) return;
  redis = await startRedis();
  t = tempStateHome('sa-rwt-');
  repo = path.join(t.root, 'repo');
  base = makeRepo(repo);
  fs.appendFileSync(path.join(repo, 'README.md'), 'uncommitted line\n');
  before = checkoutState(repo);
  worker = await startWorker({ redisUrl: redis.url, home: workerHome(), roots: [t.root], agents });
  const serverHome = path.join(t.base, 'server');
  fs.mkdirSync(serverHome, { mode: 0o700 });
  agents(path.join(serverHome, 'agents'));
  s = await startServer({ SUBAGENTS_HOME: serverHome, SUBAGENTS_ROOTS: t.root, SUBAGENTS_REDIS_URL: redis.url });
}, 60_000);

afterAll(async () => {
  await s?.close();
  if (worker) await stopWorker(worker, 'SIGKILL');
  await redis?.stop();
  t?.cleanup();
}, 30_000);

async function launch(args: Record<string, unknown>): Promise<string> {
  const r = await s.call('launch', args);
  expect(r.isError, textOf(r)).toBeFalsy();
  return sc(r).runId as string;
}

/** A worktree left in a worker's home as a runner killed mid-step leaves it: git's record, the directory, the marker. */
function leaveWorktree(home: string, runId: string, stepKey: string): string {
  const dir = path.join(home, 'worktrees', runId, `${runId}-${stepKey}`);
  fs.mkdirSync(path.dirname(dir), { recursive: true });
  const branch = `subagents/${runId}/left-${stepKey}`;
  gitIn(repo, ['worktree', 'add', '-q', '-b', branch, dir, base]);
  const git = (process.env.PATH ?? '').split(':').map((d) => path.join(d, 'git')).find((f) => fs.existsSync(f));
  fs.writeFileSync(path.join(home, 'worktrees', runId, `${stepKey}.json`), JSON.stringify({ repo, dir, branch, git }));
  return dir;
}

/** Long-polls status until `pred` holds. */
async function waitState(runId: string, pred: (v: Record<string, any>) => boolean): Promise<Record<string, any>> {
  let v: Record<string, any> = {};
  await until(async () => { v = sc(await s.call('status', { runId, waitMs: 1000 })); return pred(v); }, 60_000, `run ${runId}'s awaited state`);
  return v;
}

/** Whether a process runs (not a zombie). */
function alive(pid: number): boolean {
  try { return !/\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return false; }
}

describe.skipIf(skipped)('worktree isolation over Redis', () => {
  it('an isolated step runs in a worktree of the worker\'s home; status shows its branch and counts, the patch resource its diff', async () => {
    const task = JSON.stringify({ write: { 'new.txt': 'new\n', 'app.txt': 'line 0\nchanged\n' }, remove: ['old.txt'] });
    const runId = await launch({ agent: 'editor', task, cwd: 'repo/src', isolation: 'worktree' });
    const fin = await waitTerminal(s, runId);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const wtDir = path.join(workerHome(), 'worktrees', runId, `${runId}-0`);
    expect(JSON.parse(fin.steps[0].output.text).cwd).toBe(path.join(wtDir, 'src'));
    const branch = `subagents/${runId}/0`;
    expect(fin.steps[0].changes).toEqual({ branch, commit: expect.stringMatching(/^[0-9a-f]{40}$/), base, files: 3, insertions: 2, deletions: 10 });
    expect(gitIn(repo, ['rev-parse', branch])).toBe(fin.steps[0].changes.commit);
    expect(changedFiles(repo, base, branch)).toEqual(['src/app.txt', 'src/new.txt', 'src/old.txt']);
    // The worktree is gone, on the worker's machine, once the run has ended; the branch stays.
    expect(fs.existsSync(path.join(workerHome(), 'worktrees', runId))).toBe(false);
    expect(extraWorktrees(repo)).toEqual([]);
    const patch = await s.client.readResource({ uri: `subagents://runs/${runId}/steps/0/patch` });
    expect(patch.contents[0]!.mimeType).toBe('text/x-diff');
    const text = (patch.contents[0] as { text: string }).text;
    expect(text).toContain('diff --git a/src/new.txt b/src/new.txt');
    expect(text).toContain('+changed');
    expect(checkoutState(repo)).toEqual(before);
  }, 90_000);

  it('a chain\'s next isolated step starts from the previous step\'s branch', async () => {
    const runId = await launch({ chain: [
      { agent: 'editor', task: JSON.stringify({ write: { 'one.txt': '1\n' } }) },
      { agent: 'editor', task: JSON.stringify({ write: { 'two.txt': '2\n' } }) },
    ], cwd: 'repo', isolation: 'worktree' });
    const fin = await waitTerminal(s, runId);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const [a, b] = fin.steps;
    expect(a.changes.base).toBe(base);
    expect(b.changes.base).toBe(a.changes.commit);
    expect(changedFiles(repo, base, `subagents/${runId}/1`)).toEqual(['one.txt', 'two.txt']);
    expect(checkoutState(repo)).toEqual(before);
  }, 90_000);

  it('a cwd outside a git repository is refused INVALID_INPUT naming the path, as in local mode', async () => {
    fs.mkdirSync(path.join(t.root, 'plain'), { recursive: true });
    const r = await s.call('launch', { agent: 'editor', task: '{}', cwd: 'plain', isolation: 'worktree' });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^INVALID_INPUT: .*plain is not inside a git repository/);
    const bad = await s.call('launch', { agent: 'editor', task: '{}', cwd: 'repo', isolation: 'worktree', baseRef: '--upload-pack=x' });
    expect(textOf(bad)).toMatch(/^INVALID_INPUT: baseRef/);
  }, 30_000);

  it('dismiss with cancel of a running isolated run stops it on its worker and removes its worktree; the branch stays', async () => {
    const started = path.join(t.base, 'started-dismiss');
    const runId = await launch({ agent: 'editor', task: JSON.stringify({ startedFile: started, sleepMs: 60_000 }), cwd: 'repo', isolation: 'worktree' });
    await until(() => fs.existsSync(started), 60_000, 'the agent\'s start');
    const wt = path.join(workerHome(), 'worktrees', runId);
    expect(fs.existsSync(wt)).toBe(true);
    const r = await s.call('dismiss', { runId, cancel: true });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(r)).toMatchObject({ runId, state: 'cancelled', dismissed: true, cancelled: true });
    await until(() => !fs.existsSync(wt), 30_000, 'the worktree\'s removal');
    await until(() => extraWorktrees(repo).length === 0, 30_000, 'git\'s record of it gone');
    expect(branchesLike(repo, `subagents/${runId}/*`)).toEqual([`subagents/${runId}/0`]);
  }, 90_000);

  it('a runner that dies on a live worker: the run ends RUNNER_LOST in Redis, its agent is stopped and its worktree removed', async () => {
    const started = path.join(t.base, 'started-lost');
    const runId = await launch({ agent: 'editor', task: JSON.stringify({ startedFile: started, sleepMs: 60_000 }), cwd: 'repo', isolation: 'worktree' });
    await until(() => fs.existsSync(started), 60_000, 'the agent\'s start');
    const agentPid = Number(fs.readFileSync(started, 'utf8'));
    const running = await waitState(runId, (v) => v.runnerPid !== null);
    process.kill(running.runnerPid, 'SIGKILL');
    const fin = await waitTerminal(s, runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('RUNNER_LOST');
    await until(() => !alive(agentPid), 30_000, 'the agent stopped');
    await until(() => !fs.existsSync(path.join(workerHome(), 'worktrees', runId)), 30_000, 'the worktree\'s removal');
    await until(() => extraWorktrees(repo).length === 0, 30_000, 'git\'s record of it gone');
  }, 90_000);

  it('dismiss of an ended run asks its worker to remove worktrees it left on that machine', async () => {
    const runId = await launch({ agent: 'editor', task: JSON.stringify({ write: { 'x.txt': 'x\n' } }), cwd: 'repo', isolation: 'worktree' });
    expect((await waitTerminal(s, runId)).state).toBe('completed');
    const dir = leaveWorktree(workerHome(), runId, '7');
    const r = await s.call('dismiss', { runId });
    expect(r.isError, textOf(r)).toBeFalsy();
    await until(() => !fs.existsSync(path.join(workerHome(), 'worktrees', runId)), 30_000, 'the leftover\'s removal');
    expect(fs.existsSync(dir)).toBe(false);
    expect(extraWorktrees(repo)).toEqual([]);
    expect(worker.log()).toContain(`left by run ${runId}`);
  }, 90_000);

  it('a worker started on a home with worktrees of ended runs removes them', async () => {
    const runId = await launch({ agent: 'editor', task: JSON.stringify({ write: { 'y.txt': 'y\n' } }), cwd: 'repo', isolation: 'worktree' });
    expect((await waitTerminal(s, runId)).state).toBe('completed');
    await stopWorker(worker);
    const dir = leaveWorktree(workerHome(), runId, '8');
    worker = await startWorker({ redisUrl: redis.url, home: workerHome(), roots: [t.root] });
    expect(fs.existsSync(dir)).toBe(false);
    expect(extraWorktrees(repo)).toEqual([]);
    expect(worker.log()).toMatch(/removed 1 worktree\(s\) left in/);
  }, 90_000);

  it('gc --redis --branches removes ended runs and asks the worker that ran them to delete their branches', async () => {
    const runId = await launch({ tasks: [{ agent: 'editor', task: JSON.stringify({ write: { 'p.txt': 'p\n' } }) }, { agent: 'editor', task: JSON.stringify({ write: { 'q.txt': 'q\n' } }) }], cwd: 'repo', isolation: 'worktree' });
    expect((await waitTerminal(s, runId)).state).toBe('completed');
    expect(branchesLike(repo, `subagents/${runId}/*`).sort()).toEqual([`subagents/${runId}/0-0`, `subagents/${runId}/0-1`]);
    const gc = spawnSync(process.execPath, [MAIN_JS, 'gc', '--redis', redis.url, '--older-than', '0ms', '--branches'], { env: { PATH: process.env.PATH, HOME: process.env.HOME, SUBAGENTS_HOME: path.join(t.base, 'cli-home') }, encoding: 'utf8', timeout: 60_000 });
    expect(gc.status, gc.stderr).toBe(0);
    expect(gc.stdout).toMatch(/asked the workers that ran \d+ isolated run\(s\) to delete their branches/);
    await until(() => branchesLike(repo, `subagents/${runId}/*`).length === 0, 30_000, 'the run\'s branches deleted');
    expect((await s.call('status', { runId })).isError).toBe(true);
    expect(checkoutState(repo)).toEqual(before);
  }, 90_000);
});
