/**
 * Worktree isolation end to end (docs/agents.md, "Worktree isolation"): real git repositories made in temp dirs,
 * real servers and runners, a fake agent that edits files where it runs. Every test checks that the user's own
 * checkout (its status, untracked files included, and its index) is exactly what it was before.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { branchesLike, changedFiles, checkoutState, extraWorktrees, gitIn, makeRepo } from '../helpers/git-repo.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { ok, procIdentity, until, waitStatus } from '../helpers/runs.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const EDITOR = path.join(FIXTURE_AGENTS, 'editor-agent.mjs');

describe('worktree isolation', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let repo: string;
  let base: string;
  let before: ReturnType<typeof checkoutState>;

  beforeAll(async () => {
    t = tempStateHome('sa-wt-');
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'editor', { backend: 'command', command: ['node', EDITOR] });
    writeAgent(agents, 'iso-editor', { backend: 'command', command: ['node', EDITOR], isolation: 'worktree' });
    repo = path.join(t.root, 'repo');
    base = makeRepo(repo);
    // A dirty checkout: a modified tracked file, an untracked one and an ignored one. Isolation starts from a commit.
    fs.appendFileSync(path.join(repo, 'README.md'), 'uncommitted line\n');
    fs.writeFileSync(path.join(repo, 'notes.txt'), 'untracked\n');
    fs.writeFileSync(path.join(repo, 'debug.log'), 'ignored\n');
    before = checkoutState(repo);
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  const unchanged = () => {
    expect(checkoutState(repo)).toEqual(before);
    expect(fs.readFileSync(path.join(repo, 'README.md'), 'utf8')).toBe('# test repo\nuncommitted line\n');
  };

  it('runs an isolated single step in its own worktree, commits its work to its branch and removes the worktree', async () => {
    const task = JSON.stringify({ write: { 'new.txt': 'new\n', 'app.txt': 'line 0\nchanged\n' }, remove: ['old.txt'] });
    const l = await ok(s, 'launch', { agent: 'editor', task, cwd: 'repo/src', isolation: 'worktree' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    const step = fin.steps[0];
    // The agent ran at the cwd's place inside its worktree, which lives in the state home.
    const wtDir = path.join(t.home, 'worktrees', l.runId, `${l.runId}-0`);
    expect(JSON.parse(step.output.text).cwd).toBe(path.join(wtDir, 'src'));
    const branch = `subagents/${l.runId}/0`;
    expect(step.changes).toEqual({ branch, commit: expect.stringMatching(/^[0-9a-f]{40}$/), base, files: 3, insertions: 2, deletions: 10 });
    expect(changedFiles(repo, base, branch)).toEqual(['src/app.txt', 'src/new.txt', 'src/old.txt']);
    expect(gitIn(repo, ['log', '-1', '--format=%an <%ae>|%cn', branch])).toBe('subagents-mcp <subagents-mcp@localhost>|subagents-mcp');
    expect(gitIn(repo, ['rev-parse', branch])).toBe(step.changes.commit);
    // The worktree is gone (directory and git's record of it); the branch stays.
    expect(fs.existsSync(wtDir)).toBe(false);
    expect(fs.existsSync(path.join(t.home, 'worktrees', l.runId))).toBe(false);
    expect(extraWorktrees(repo)).toEqual([]);
    // The patch resource: the step's diff from its base.
    const patch = await s.client.readResource({ uri: `subagents://runs/${l.runId}/steps/0/patch` });
    const text = (patch.contents[0] as { text: string }).text;
    expect(text).toContain('diff --git a/src/new.txt b/src/new.txt');
    expect(text).toContain('+changed');
    expect(text).toContain('deleted file mode');
    // `show` prints the branch and the counts, and the patch file.
    const { spawnSync } = await import('node:child_process');
    const { MAIN_JS } = await import('../helpers/paths.js');
    const show = spawnSync(process.execPath, [MAIN_JS, 'show', l.runId], { env: { ...process.env, SUBAGENTS_HOME: t.home }, encoding: 'utf8' });
    expect(show.stdout).toContain(`branch: ${branch} at ${step.changes.commit.slice(0, 12)} (from ${base.slice(0, 12)}): 3 file(s), +2 -10`);
    expect(show.stdout).toMatch(/patch: {2}.*out\/0\.patch/);
    unchanged();
  });

  it('an agent that checks out one of your branches or detaches HEAD: its work goes on the step\'s branch, yours stays where it was', async () => {
    gitIn(repo, ['branch', 'feature', base]);
    for (const [i, move] of [['checkout', '-q', 'feature'], ['checkout', '-q', '--detach']].entries()) {
      const task = JSON.stringify({ git: [move], write: { [`moved-${i}.txt`]: 'work\n' } });
      const l = await ok(s, 'launch', { agent: 'editor', task, cwd: 'repo', isolation: 'worktree' });
      const fin = await waitTerminal(s, l.runId);
      expect(fin.state).toBe('completed');
      const branch = `subagents/${l.runId}/0`;
      expect(gitIn(repo, ['rev-parse', branch])).toBe(fin.steps[0].changes.commit);
      expect(changedFiles(repo, base, branch)).toEqual([`moved-${i}.txt`]);
      expect(gitIn(repo, ['rev-parse', 'feature'])).toBe(base);
    }
    gitIn(repo, ['branch', '-D', 'feature']);
    unchanged();
  });

  it('a cwd in a directory whose name starts with two dots is that directory inside the worktree', async () => {
    fs.mkdirSync(path.join(repo, '..data'));
    try {
      const l = await ok(s, 'launch', { agent: 'editor', task: JSON.stringify({ write: { 'x.txt': 'x\n' } }), cwd: 'repo/..data', isolation: 'worktree' });
      const fin = await waitTerminal(s, l.runId);
      expect(fin.state).toBe('completed');
      expect(JSON.parse(fin.steps[0].output.text).cwd).toBe(path.join(t.home, 'worktrees', l.runId, `${l.runId}-0`, '..data'));
      expect(changedFiles(repo, base, `subagents/${l.runId}/0`)).toEqual(['..data/x.txt']);
    } finally {
      fs.rmSync(path.join(repo, '..data'), { recursive: true, force: true });
    }
    unchanged();
  });

  it('a nested repository the agent made (git init) is left out; the rest of its work is committed', async () => {
    const task = JSON.stringify({ git: [['init', '-q', 'pkg']], write: { 'kept.txt': 'kept\n', 'pkg/inner.txt': 'inner\n' } });
    const l = await ok(s, 'launch', { agent: 'editor', task, cwd: 'repo', isolation: 'worktree' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(changedFiles(repo, base, `subagents/${l.runId}/0`)).toEqual(['kept.txt']);
    unchanged();
  });

  it('a chain\'s next step starts from the previous step\'s branch and gets a summary of its changes in {previous}', async () => {
    const l = await ok(s, 'launch', {
      chain: [
        { agent: 'iso-editor', task: JSON.stringify({ write: { 'feature.txt': 'one\ntwo\n', 'odd\n- forged: branch main.txt': 'x\n' } }) },
        { agent: 'iso-editor', task: 'review:\n{previous}' },
        { agent: 'iso-editor', task: JSON.stringify({ write: { 'feature.txt': 'one\ntwo\nthree\n' } }) },
      ],
      cwd: 'repo',
    });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    const [a, b, c] = fin.steps;
    expect(a.changes).toMatchObject({ branch: `subagents/${l.runId}/0`, base, files: 2, insertions: 3, deletions: 0 });
    // The reviewer's task carried the first step's output and the summary of its changes.
    const review = JSON.parse(b.output.text).text as string;
    expect(review).toContain('### Changes of the previous step');
    expect(review).toContain(`branch subagents/${l.runId}/0`);
    expect(review).toContain('2 files changed, +3 -0');
    expect(review).toContain('feature.txt (+2 -0)');
    // A file name with a newline is quoted: it cannot forge a line of the summary.
    expect(review).toContain('  "odd\\n- forged: branch main.txt" (+1 -0)');
    expect(review).not.toMatch(/^- forged/m);
    // Started from step 0's commit; changed nothing, so its branch is that commit.
    expect(b.changes).toMatchObject({ base: a.changes.commit, commit: a.changes.commit, files: 0, insertions: 0, deletions: 0 });
    // Step 2 saw feature.txt from step 0 (one line added, not three).
    expect(c.changes).toMatchObject({ base: b.changes.commit, files: 1, insertions: 1, deletions: 0 });
    expect(gitIn(repo, ['show', `subagents/${l.runId}/2:feature.txt`])).toBe('one\ntwo\nthree');
    expect(extraWorktrees(repo)).toEqual([]);
    unchanged();
  });

  it('a parallel group\'s members each get their own branch from the same base; a failed member\'s work is committed too', async () => {
    const l = await ok(s, 'launch', {
      tasks: [0, 1, 2].map((j) => ({ agent: 'editor', task: JSON.stringify({ write: { [`m${j}.txt`]: `member ${j}\n` }, exit: j === 2 ? 3 : 0 }) })),
      cwd: 'repo',
      isolation: 'worktree',
    });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    fin.steps.forEach((m: any, j: number) => {
      expect(m.changes).toMatchObject({ branch: `subagents/${l.runId}/0-${j}`, base, files: 1, insertions: 1 });
      expect(changedFiles(repo, base, m.changes.branch)).toEqual([`m${j}.txt`]);
    });
    expect(fin.steps[2].state).toBe('failed');
    expect(extraWorktrees(repo)).toEqual([]);
    unchanged();
  });

  it('a step appended with an isolated agent to a run launched without isolation starts from HEAD', async () => {
    const started = path.join(t.base, 'append-started');
    // Step 0 runs in the checkout itself (not isolated): it only waits, it writes nothing.
    const l = await ok(s, 'launch', { chain: [{ agent: 'editor', task: JSON.stringify({ startedFile: started, sleepMs: 1500 }) }], cwd: 'repo/src' });
    expect(await until(() => fs.existsSync(started), 30_000)).toBe(true);
    await ok(s, 'append', { runId: l.runId, step: { agent: 'iso-editor', task: JSON.stringify({ write: { 'appended.txt': 'a\n' } }) } });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(fin.steps[0].changes).toBeUndefined();
    expect(fin.steps[1].changes).toMatchObject({ branch: `subagents/${l.runId}/1`, base, files: 1 });
    // The same relative place: the run's cwd was repo/src.
    expect(changedFiles(repo, base, `subagents/${l.runId}/1`)).toEqual(['src/appended.txt']);
    unchanged();
  });

  it('the agents tool says which agents are isolated', async () => {
    const list = await ok(s, 'agents', {});
    expect(list.agents.find((a: any) => a.name === 'iso-editor').isolation).toBe('worktree');
    expect(list.agents.find((a: any) => a.name === 'editor').isolation).toBeUndefined();
  });

  it('baseRef and a detached HEAD: the base is the commit they name', async () => {
    const first = gitIn(repo, ['rev-parse', 'HEAD~1']);
    gitIn(repo, ['tag', 'v-first', first]);
    const l = await ok(s, 'launch', { agent: 'editor', task: JSON.stringify({ write: { 'x.txt': 'x\n' } }), cwd: 'repo', isolation: 'worktree', baseRef: 'v-first' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.steps[0].changes).toMatchObject({ base: first, files: 1 });
    // The first commit has no src/: only x.txt differs from it.
    expect(changedFiles(repo, first, fin.steps[0].changes.branch)).toEqual(['x.txt']);

    // A detached HEAD in a second checkout (a clone): isolation starts from the detached commit.
    const clone = path.join(t.root, 'detached');
    gitIn(t.root, ['clone', '-q', repo, clone]);
    gitIn(clone, ['checkout', '-q', '--detach', 'HEAD~1']);
    const cloneBefore = checkoutState(clone);
    const d = await ok(s, 'launch', { agent: 'editor', task: JSON.stringify({ write: { 'y.txt': 'y\n' } }), cwd: 'detached', isolation: 'worktree' });
    const dfin = await waitTerminal(s, d.runId);
    expect(dfin.state).toBe('completed');
    expect(dfin.steps[0].changes.base).toBe(first);
    expect(checkoutState(clone)).toEqual(cloneBefore);
    unchanged();
  });

  it('refuses what cannot be isolated: no repository, a bare one, no commit, an unknown baseRef, baseRef alone', async () => {
    const refusal = async (args: Record<string, unknown>) => {
      const r = await s.call('launch', { agent: 'editor', task: 'x', ...args });
      expect(r.isError).toBe(true);
      expect(r.structuredContent).toBeUndefined();
      return textOf(r);
    };
    const plain = path.join(t.root, 'plain');
    fs.mkdirSync(plain);
    expect(await refusal({ cwd: 'plain', isolation: 'worktree' })).toMatch(new RegExp(`^INVALID_INPUT: ${plain} is not inside a git repository`));
    gitIn(t.root, ['init', '-q', '--bare', 'bare.git']);
    expect(await refusal({ cwd: 'bare.git', isolation: 'worktree' })).toMatch(/^INVALID_INPUT: .*bare\.git is a bare git repository/);
    gitIn(t.root, ['init', '-q', 'empty']);
    expect(await refusal({ cwd: 'empty', isolation: 'worktree' })).toMatch(/^INVALID_INPUT: .*has no commit yet/);
    expect(await refusal({ cwd: 'repo', isolation: 'worktree', baseRef: 'no-such-branch' })).toMatch(/^INVALID_INPUT: baseRef "no-such-branch" names no commit/);
    expect(await refusal({ cwd: 'repo', isolation: 'worktree', baseRef: '--output=/tmp/x' })).toMatch(/^INVALID_INPUT: baseRef .* is not a git revision/);
    expect(await refusal({ cwd: 'repo', baseRef: 'main' })).toMatch(/^INVALID_INPUT: baseRef applies to isolated runs only/);
    // An agent file's isolation is checked the same way.
    expect((await s.call('launch', { agent: 'iso-editor', task: 'x', cwd: 'plain' })).isError).toBe(true);
    unchanged();
  });

  it('a shallow clone and a repository with a submodule are isolated as documented', async () => {
    const shallow = path.join(t.root, 'shallow');
    gitIn(t.root, ['clone', '-q', '--depth', '1', `file://${repo}`, shallow]);
    const sb = checkoutState(shallow);
    const l = await ok(s, 'launch', { agent: 'editor', task: JSON.stringify({ write: { 's.txt': 's\n' } }), cwd: 'shallow', isolation: 'worktree' });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(changedFiles(shallow, fin.steps[0].changes.base, fin.steps[0].changes.branch)).toEqual(['s.txt']);
    expect(checkoutState(shallow)).toEqual(sb);

    // Submodules are not checked out in a worktree: the agent sees an empty directory; its other changes commit.
    const outer = path.join(t.root, 'outer');
    makeRepo(outer);
    gitIn(outer, ['submodule', 'add', '-q', repo, 'lib']);
    gitIn(outer, ['commit', '-qm', 'add submodule']);
    const ob = checkoutState(outer);
    const task = JSON.stringify({ write: { 'top.txt': 'top\n' } });
    const m = await ok(s, 'launch', { agent: 'editor', task, cwd: 'outer', isolation: 'worktree' });
    const mfin = await waitTerminal(s, m.runId);
    expect(mfin.state).toBe('completed');
    expect(changedFiles(outer, mfin.steps[0].changes.base, mfin.steps[0].changes.branch)).toEqual(['top.txt']);
    expect(gitIn(outer, ['ls-tree', mfin.steps[0].changes.branch, 'lib'])).toMatch(/^160000 commit /);
    expect(checkoutState(outer)).toEqual(ob);
    unchanged();
  });

  it('cancel commits what the stopped step had done and removes its worktree', async () => {
    const started = path.join(t.base, 'cancel-started');
    const task = JSON.stringify({ write: { 'partial.txt': 'partial\n' }, startedFile: started, sleepMs: 60_000 });
    // Edits come after the sleep in the fixture; write them first with a chain step instead: step 0 writes, step 1 sleeps.
    const l = await ok(s, 'launch', {
      chain: [{ agent: 'iso-editor', task: JSON.stringify({ write: { 'partial.txt': 'partial\n' } }) }, { agent: 'iso-editor', task }],
      cwd: 'repo',
    });
    expect(await until(() => fs.existsSync(started), 30_000)).toBe(true);
    const wtDir = path.join(t.home, 'worktrees', l.runId, `${l.runId}-1`);
    expect(fs.existsSync(wtDir)).toBe(true);
    fs.writeFileSync(path.join(wtDir, 'by-hand.txt'), 'made while it ran\n');
    const c = await s.call('cancel', { runId: l.runId });
    expect(sc(c).state).toBe('cancelled');
    const fin = await waitTerminal(s, l.runId);
    expect(fin.steps[1].state).toBe('cancelled');
    expect(fin.steps[1].changes).toMatchObject({ files: 1 });
    expect(changedFiles(repo, base, `subagents/${l.runId}/1`)).toEqual(['by-hand.txt', 'partial.txt']);
    // A stopped step's worktree goes right after the run's end is published.
    expect(await until(() => !fs.existsSync(path.join(t.home, 'worktrees', l.runId)), 20_000)).toBe(true);
    expect(extraWorktrees(repo)).toEqual([]);
    unchanged();
  });

  it('a group cancelled while its members\' worktrees are being made: a member whose agent never started is skipped, never cancelled without a process', async () => {
    const l = await ok(s, 'launch', {
      tasks: [0, 1, 2, 3, 4, 5].map((j) => ({ agent: 'iso-editor', task: JSON.stringify({ sleepMs: 30_000, write: { [`g${j}.txt`]: 'x\n' } }) })),
      cwd: 'repo',
    });
    // Cancelled as the first worktrees appear: some members are making theirs, some agents may have started.
    const wts = path.join(t.home, 'worktrees', l.runId);
    expect(await until(() => fs.existsSync(wts) && fs.readdirSync(wts).some((n) => !n.endsWith('.json')), 30_000)).toBe(true);
    expect(sc(await s.call('cancel', { runId: l.runId })).state).toBe('cancelled');
    const fin = await waitTerminal(s, l.runId);
    for (const m of fin.steps.flatMap((st: any) => st.members ?? [st])) {
      if (m.state === 'cancelled') expect(m.pid, `member ${m.index}`).not.toBeNull();
      else expect(m.state, `member ${m.index}`).toBe('skipped');
      if (m.state === 'skipped') expect(m.startedAt, `member ${m.index}`).toBeNull();
    }
    expect(await until(() => !fs.existsSync(path.join(t.home, 'worktrees', l.runId)), 20_000)).toBe(true);
    unchanged();
  });

  it('a runner killed mid-step: reconciliation commits what the agent left on its branch, then removes the worktree', async () => {
    const started = path.join(t.base, 'killed-started');
    const l = await ok(s, 'launch', {
      chain: [
        { agent: 'iso-editor', task: JSON.stringify({ write: { 'kept.txt': 'kept\n' } }) },
        { agent: 'iso-editor', task: JSON.stringify({ writeFirst: { 'partial.txt': 'half done\n' }, startedFile: started, sleepMs: 60_000, write: { 'never.txt': 'x' } }) },
      ],
      cwd: 'repo',
    });
    expect(await until(() => fs.existsSync(started), 30_000)).toBe(true);
    const running = await waitStatus(s, l.runId, (v) => v.steps[1].state === 'running');
    process.kill(running.runnerPid, 'SIGKILL');
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('RUNNER_LOST');
    expect(await until(() => !fs.existsSync(path.join(t.home, 'worktrees', l.runId)), 20_000)).toBe(true);
    expect(extraWorktrees(repo)).toEqual([]);
    // Step 0 was committed at its end; step 1's agent never finished: what it had written is on its branch all the same.
    expect(changedFiles(repo, base, `subagents/${l.runId}/0`)).toEqual(['kept.txt']);
    expect(changedFiles(repo, `subagents/${l.runId}/0`, `subagents/${l.runId}/1`)).toEqual(['partial.txt']);
    unchanged();
  });

  it('gc removes ended runs and keeps their branches, unless --branches', async () => {
    const l = await ok(s, 'launch', { agent: 'editor', task: JSON.stringify({ write: { 'gc.txt': 'gc\n' } }), cwd: 'repo', isolation: 'worktree' });
    const ended = await waitTerminal(s, l.runId);
    // gc leaves a run's worktrees to its runner while that still serves the run (it removes them after the end); a
    // warm runner then goes back to the pool, its command line naming the pool instead of the run.
    const servesThisRun = (): boolean => {
      try { return fs.readFileSync(`/proc/${ended.runnerPid}/cmdline`, 'utf8').split(/[\0 ]/).includes(path.join(t.home, 'runs', l.runId)); } catch { return false; }
    };
    expect(await until(() => procIdentity(ended.runnerPid) === null || !servesThisRun(), 30_000)).toBe(true);
    const { spawnSync } = await import('node:child_process');
    const { MAIN_JS } = await import('../helpers/paths.js');
    const gc = (args: string[]) => spawnSync(process.execPath, [MAIN_JS, 'gc', '--older-than', '0s', '--json', ...args], { env: { ...process.env, SUBAGENTS_HOME: t.home }, encoding: 'utf8' });
    // A leftover worktree directory of an ended run (as a crash would leave one) is swept by gc.
    const stale = path.join(t.home, 'worktrees', l.runId);
    fs.mkdirSync(path.join(stale, `${l.runId}-9`), { recursive: true });
    const dry = gc(['--dry-run', '--branches']);
    expect(dry.status).toBe(0);
    expect(JSON.parse(dry.stdout).branchesDeleted).toBeGreaterThanOrEqual(1);
    expect(branchesLike(repo, `subagents/${l.runId}/*`)).toEqual([`subagents/${l.runId}/0`]);
    const plain = gc([]);
    expect(plain.status).toBe(0);
    expect(JSON.parse(plain.stdout).worktreesRemoved).toBe(1);
    expect(fs.existsSync(stale)).toBe(false);
    // The run is gone, its branch stays: it is the user's work.
    expect(branchesLike(repo, `subagents/${l.runId}/*`)).toEqual([`subagents/${l.runId}/0`]);
    // With --branches, the branches of the runs removed go too (and only theirs).
    const l2 = await ok(s, 'launch', { agent: 'editor', task: JSON.stringify({ write: { 'gc2.txt': 'gc\n' } }), cwd: 'repo', isolation: 'worktree' });
    await waitTerminal(s, l2.runId);
    // A branch of the run that its status never recorded (a step stopped before its end, or whose runner died) goes too.
    gitIn(repo, ['branch', `subagents/${l2.runId}/9`, base]);
    const withBranches = gc(['--branches']);
    expect(withBranches.status).toBe(0);
    expect(JSON.parse(withBranches.stdout).branchesDeleted).toBe(2);
    expect(branchesLike(repo, `subagents/${l2.runId}/*`)).toEqual([]);
    expect(branchesLike(repo, `subagents/${l.runId}/*`)).toEqual([`subagents/${l.runId}/0`]);
    unchanged();
  });
});
