import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { CAT, fakeAgentAlive, ok } from '../helpers/runs.js';
import { startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

/** The most `peers` holders any member saw at once (each member records what it saw in <dir>/<pid>.max). */
function maxSeen(dir: string): number[] {
  return fs.readdirSync(dir).filter((n) => n.endsWith('.max')).map((n) => Number(fs.readFileSync(path.join(dir, n), 'utf8')));
}

describe.concurrent('parallel runs: concurrency, failFast, the members as the steps', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let n = 0;
  const probeDir = () => path.join(t.base, `peers-${n++}`);
  beforeAll(async () => {
    t = tempStateHome('sa-par-');
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'echo', { backend: 'command', command: [CAT] });
    writeAgent(dir, 'fail', { backend: 'command', command: ['/bin/sh', '-c', 'echo bye; exit 2'] });
    writeAgent(dir, 'flood', { backend: 'command', command: ['node', FAKE, 'flood', '20000'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  /** A `peers` agent per probe directory (its argv names the directory). */
  function peersAgent(dir: string): string {
    const name = `peers-${path.basename(dir)}`;
    writeAgent(path.join(t.home, 'agents'), name, { backend: 'command', command: ['node', FAKE, 'peers', dir] });
    return name;
  }

  it('never runs more members than concurrency, and does run that many at once', async () => {
    const dir = probeDir();
    const agent = peersAgent(dir);
    // The first wave waits until it has seen 3 holders (so 3 at once is reached); later members just overlap briefly.
    const tasks = Array.from({ length: 7 }, (_, j) => ({ agent, task: JSON.stringify(j < 3 ? { target: 3 } : { target: 1, lingerMs: 100 }) }));
    const l = await ok(s, 'launch', { tasks, concurrency: 3 });
    expect(l.mode).toBe('parallel');
    // A parallel run's steps are its members.
    expect(l.steps.map((x: any) => x.index)).toEqual([0, 1, 2, 3, 4, 5, 6]);
    expect(l.fanout).toEqual({ used: 7, limit: 64, remaining: 57 });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    const seen = maxSeen(dir);
    expect(seen).toHaveLength(7);
    expect(Math.max(...seen)).toBe(3);
    expect(fin.steps).toHaveLength(7);
    expect(fin.steps.every((m: any) => m.state === 'completed' && m.exitCode === 0 && m.members === undefined)).toBe(true);
    // The run's output: every member's, joined under headers in index order.
    expect(fin.output.text).toBe(fin.steps.map((m: any, j: number) => `### ${agent} #${j}\n\n${m.output.text.trimEnd()}`).join('\n\n'));
  });

  it('defaults to a concurrency of 4', async () => {
    const dir = probeDir();
    const agent = peersAgent(dir);
    const tasks = Array.from({ length: 6 }, (_, j) => ({ agent, task: JSON.stringify(j < 4 ? { target: 4 } : { target: 1, lingerMs: 100 }) }));
    const l = (await ok(s, 'launch', { tasks }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(Math.max(...maxSeen(dir))).toBe(4);
  });

  it('failFast: a failed member cancels the running ones and skips the unstarted; their claims are returned', async () => {
    const dir = probeDir();
    const agent = peersAgent(dir);
    const l = (await ok(s, 'launch', {
      tasks: [
        // Fails only once its sibling is running, so the sibling is provably mid-run when the group stops.
        { agent, task: JSON.stringify({ target: 2, lingerMs: 0, exit: 1 }) },
        { agent, task: JSON.stringify({ target: 2, lingerMs: 60_000 }) },
        { agent: 'echo', task: 'never 1' },
        { agent: 'echo', task: 'never 2' },
      ],
      concurrency: 2,
      failFast: true,
    }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('STEP_FAILED');
    expect(fin.steps.map((m: any) => m.state)).toEqual(['failed', 'cancelled', 'skipped', 'skipped']);
    expect(fin.steps[0]).toMatchObject({ exitCode: 1, signal: null });
    expect(fin.steps[1].signal).toBe('SIGTERM');
    expect(fin.steps[1].error.code).toBe('CANCELLED');
    expect(fin.steps[2]).toMatchObject({ startedAt: null, pid: null });
    expect(fakeAgentAlive(fin.steps[1].pid)).toBe(false);
    expect(fin.fanout).toEqual({ used: 2, limit: 64, remaining: 62 });
  });

  it('without failFast every member runs and the group fails if any failed', async () => {
    const l = (await ok(s, 'launch', {
      tasks: [{ agent: 'fail', task: 'x' }, { agent: 'echo', task: 'b' }, { agent: 'echo', task: 'c' }, { agent: 'echo', task: 'd' }],
      concurrency: 2,
    }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('STEP_FAILED');
    expect(fin.error.message).toMatch(/1 of 4 members failed/);
    expect(fin.steps.map((m: any) => m.state)).toEqual(['failed', 'completed', 'completed', 'completed']);
    expect(fin.steps[0].exitCode).toBe(2);
    expect(fin.output.text).toBe('### fail #0\n\nbye\n\n### echo #1\n\nb\n\n### echo #2\n\nc\n\n### echo #3\n\nd');
  });

  it('bounds inline output per member and for the run, with the real byte counts', async () => {
    const l = (await ok(s, 'launch', { tasks: [{ agent: 'flood', task: 'x' }, { agent: 'echo', task: 'small' }] }));
    await waitTerminal(s, l.runId);
    const v = (await ok(s, 'status', { runId: l.runId, outputBytes: 1024 }));
    expect(v.state).toBe('completed');
    const [big, small] = v.steps;
    expect(big.output.bytes).toBe(20000);
    expect(big.output.truncated).toBe(true);
    expect(Buffer.byteLength(big.output.text)).toBeLessThan(1024);
    expect(small.output).toEqual({ text: 'small', bytes: 5, truncated: false });
    expect(v.output.truncated).toBe(true);
    expect(v.output.bytes).toBeGreaterThan(20000);
    expect(Buffer.byteLength(v.output.text)).toBeLessThan(1024);
  });
});
