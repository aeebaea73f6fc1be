import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { CAT, fakeAgentAlive, waitStatus, ok } from '../helpers/runs.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

describe.concurrent('chains: {previous}, the step tree, failure and cancel semantics', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-chain-');
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'echo', { backend: 'command', command: [CAT] });
    writeAgent(dir, 'echo2', { backend: 'command', command: [CAT] });
    writeAgent(dir, 'fail', { backend: 'command', command: ['/bin/sh', '-c', 'echo bye; exit 3'] });
    writeAgent(dir, 'false', { backend: 'command', command: ['/bin/sh', '-c', 'exit 1'] });
    writeAgent(dir, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  it('passes a parallel group\'s outputs joined under headers to the next step; the run output is the last step\'s', async () => {
    const l = await ok(s, 'launch', {
      chain: [
        { parallel: [{ agent: 'echo', task: 'alpha {previous} stays' }, { agent: 'echo2', task: 'beta' }] },
        { agent: 'echo', task: 'got:\n{previous}\nend' },
      ],
      label: 'chain-previous',
    });
    expect(l.mode).toBe('chain');
    expect(l.steps).toEqual([{ index: 0, agent: 'parallel', state: expect.any(String) }, { index: 1, agent: 'echo', state: expect.any(String) }]);
    expect(l.fanout).toEqual({ used: 3, limit: 64, remaining: 61 });

    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(fin.error).toBeNull();
    // The first step has no previous step: its `{previous}` is left as written.
    const joined = '### echo #0\n\nalpha {previous} stays\n\n### echo2 #1\n\nbeta';
    // Substituted once: the `{previous}` that arrives inside the previous output is not replaced again.
    expect(fin.output.text).toBe(`got:\n${joined}\nend`);
    expect(fin.output.uri).toBe(`subagents://runs/${l.runId}/output`);

    // The step tree: a parallel entry is one step with members, each shaped like a step.
    expect(fin.steps).toHaveLength(2);
    const [group, last] = fin.steps;
    expect(group).toMatchObject({ index: 0, agent: 'parallel', state: 'completed', error: null });
    expect(group.startedAt).toEqual(expect.any(String));
    expect(group.endedAt).toEqual(expect.any(String));
    expect(group.members).toHaveLength(2);
    group.members.forEach((m: any, j: number) => {
      expect(m).toMatchObject({ index: j, agent: j === 0 ? 'echo' : 'echo2', state: 'completed', exitCode: 0, signal: null, error: null });
      expect(m.pid).toBeGreaterThan(0);
      expect(Date.parse(m.endedAt)).toBeGreaterThanOrEqual(Date.parse(m.startedAt));
      expect(m.stderrTail).toBeUndefined();
    });
    expect(group.members[0].output).toEqual({ text: 'alpha {previous} stays', bytes: 22, truncated: false });
    expect(group.members[1].output.text).toBe('beta');
    expect(last).toMatchObject({ index: 1, agent: 'echo', state: 'completed', exitCode: 0, signal: null });
    expect(last.output.text).toBe(`got:\n${joined}\nend`);
    expect(Date.parse(last.startedAt)).toBeGreaterThanOrEqual(Date.parse(group.endedAt));
    expect(fin.pendingAppends).toBe(0);
    // Once ended, fanout reports the agents that actually started.
    expect(fin.fanout).toEqual({ used: 3, limit: 64, remaining: 61 });
  });

  it('a failed step fails the run (STEP_FAILED) and skips the later steps; the output is the failed step\'s', async () => {
    const l = (await ok(s, 'launch', {
      chain: [{ agent: 'echo', task: 'one' }, { agent: 'fail', task: 'two {previous}' }, { agent: 'echo', task: 'three' }, { parallel: [{ agent: 'echo', task: 'x' }] }],
    }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('STEP_FAILED');
    expect(fin.error.message).toMatch(/fail.*code 3/);
    expect(fin.steps.map((x: any) => x.state)).toEqual(['completed', 'failed', 'skipped', 'skipped']);
    expect(fin.steps[1]).toMatchObject({ exitCode: 3, signal: null });
    expect(fin.steps[1].stderrTail).toEqual(expect.any(String));
    expect(fin.steps[1].output.text).toBe('bye\n');
    expect(fin.steps[3].members.map((m: any) => m.state)).toEqual(['skipped']);
    expect(fin.steps[2].startedAt).toBeNull();
    expect(fin.output.text).toBe('bye\n');
    // The skipped steps' fan-out claims were returned: only two agents started.
    expect(fin.fanout).toEqual({ used: 2, limit: 64, remaining: 62 });
  });

  it('failFast inside a chain: the group fails at once, running members are cancelled, unstarted skipped, the chain stops', async () => {
    // The failing member fails only once its sibling runs (fake agent `peers`), so the sibling is provably
    // mid-run when the group stops, however slowly the machine starts processes.
    const probe = fs.mkdtempSync(path.join(t.base, 'peers-'));
    const peers = 'peers-chain';
    writeAgent(path.join(t.home, 'agents'), peers, { backend: 'command', command: ['node', FAKE, 'peers', probe] });
    const l = (await ok(s, 'launch', {
      chain: [
        {
          parallel: [
            { agent: peers, task: JSON.stringify({ target: 2, lingerMs: 60_000 }) },
            { agent: peers, task: JSON.stringify({ target: 2, lingerMs: 0, exit: 3 }) },
            { agent: 'echo', task: 'never' },
          ],
          concurrency: 2,
          failFast: true,
        },
        { agent: 'echo', task: 'after {previous}' },
      ],
    }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('STEP_FAILED');
    const g = fin.steps[0];
    expect(g.state).toBe('failed');
    expect(g.members.map((m: any) => m.state)).toEqual(['cancelled', 'failed', 'skipped']);
    expect(g.members[0].signal).toBe('SIGTERM');
    expect(g.members[2].startedAt).toBeNull();
    expect(fin.steps[1].state).toBe('skipped');
    expect(fakeAgentAlive(g.members[0].pid)).toBe(false);
  });

  it('cancel mid-group: running members cancelled, unstarted skipped, the group and the run cancelled, later steps skipped', async () => {
    const l = (await ok(s, 'launch', {
      chain: [
        { parallel: [{ agent: 'sleeper', task: 'a' }, { agent: 'sleeper', task: 'b' }, { agent: 'sleeper', task: 'c' }], concurrency: 2 },
        { agent: 'echo', task: 'after' },
      ],
    }));
    const live = await waitStatus(s, l.runId, (v) => v.steps[0].members.filter((m: any) => m.pid).length === 2);
    const pids = live.steps[0].members.filter((m: any) => m.pid).map((m: any) => m.pid as number);
    const c = await s.call('cancel', { runId: l.runId });
    expect(c.isError, textOf(c)).toBeFalsy();
    expect(sc(c).state).toBe('cancelled');
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('cancelled');
    expect(fin.error.code).toBe('CANCELLED');
    expect(fin.steps[0].state).toBe('cancelled');
    expect(fin.steps[0].members.map((m: any) => m.state)).toEqual(['cancelled', 'cancelled', 'skipped']);
    expect(fin.steps[0].members[0].error.code).toBe('CANCELLED');
    expect(fin.steps[1].state).toBe('skipped');
    expect(fin.fanout.used).toBe(2);
    for (const pid of pids) expect(fakeAgentAlive(pid)).toBe(false);
  });

  it('a parallel-only chain is still a chain: its output is the group\'s joined text', async () => {
    const l = (await ok(s, 'launch', { chain: [{ parallel: [{ agent: 'echo', task: 'p' }, { agent: 'echo', task: 'q' }] }] }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('### echo #0\n\np\n\n### echo #1\n\nq');
    expect(fs.readFileSync(path.join(t.home, 'runs', l.runId, 'out', 'run.txt'), 'utf8')).toBe(fin.output.text);
  });

  it('a run whose first step fails at once is launched all the same (never HANDSHAKE_FAILED)', async () => {
    for (const args of [{ agent: 'false', task: 'x' }, { chain: [{ agent: 'false', task: 'x' }, { agent: 'echo', task: 'y' }] }, { tasks: [{ agent: 'false', task: 'x' }] }]) {
      const l = await ok(s, 'launch', args);
      const fin = await waitTerminal(s, l.runId);
      expect(fin.state).toBe('failed');
      expect(fin.error.code).toBe('STEP_FAILED');
    }
  });

  it('refuses malformed chain and parallel shapes with INVALID_INPUT', async () => {
    const bad: Array<Record<string, unknown>> = [
      { chain: [{ agent: 'echo' }] },
      { chain: [{ agent: 'echo', task: 't', parallel: [{ agent: 'echo', task: 't' }] }] },
      { chain: [{ agent: 'echo', task: 't', concurrency: 2 }] },
      { chain: [{ agent: 'echo', task: 't' }], concurrency: 2 },
      { chain: [] },
      { chain: [{ parallel: [] }] },
      { tasks: [{ agent: 'echo', task: 't' }], chain: [{ agent: 'echo', task: 't' }] },
      { tasks: [{ agent: 'echo', task: 't' }], agent: 'echo', task: 't' },
      { tasks: [{ agent: 'echo', task: 't' }], concurrency: 0 },
      { agent: 'echo', task: 't', failFast: true },
    ];
    for (const args of bad) {
      const r = await s.call('launch', args);
      expect(r.isError, JSON.stringify(args)).toBe(true);
      expect(textOf(r), JSON.stringify(args)).toMatch(/^INVALID_INPUT: /);
    }
    const unknown = await s.call('launch', { chain: [{ agent: 'echo', task: 't' }, { parallel: [{ agent: 'nope', task: 't' }] }] });
    expect(textOf(unknown)).toMatch(/^UNKNOWN_AGENT: /);
  });
});
