import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { CAT, fakeAgentAlive, ok } from '../helpers/runs.js';
import { startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

/** Pids of every agent step or member that started. */
function startedPids(steps: any[]): number[] {
  return steps.flatMap((st) => (st.members ? st.members : [st])).map((m: any) => m.pid).filter((p: number | null) => p !== null);
}

describe('timeouts: the whole run (timeoutMs) and each agent (its file\'s timeoutMs)', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-timeout-');
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'echo', { backend: 'command', command: [CAT] });
    writeAgent(dir, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    writeAgent(dir, 'slow', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'], timeoutMs: 1500 });
    writeAgent(dir, 'stubborn', { backend: 'command', command: ['node', FAKE, 'ignore-term', '60000'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  it('a chain over its whole-run limit: the running step is cancelled, later steps skipped, the run fails TIMEOUT', async () => {
    const l = await ok(s, 'launch', { chain: [{ agent: 'echo', task: 'first' }, { agent: 'stubborn', task: 'x' }, { agent: 'echo', task: 'never' }], timeoutMs: 3500 });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('TIMEOUT');
    expect(fin.error.message).toMatch(/3500 ms/);
    expect(fin.steps.map((x: any) => x.state)).toEqual(['completed', 'cancelled', 'skipped']);
    // It ignored SIGTERM: the grace ran out and SIGKILL ended it.
    expect(fin.steps[1].signal).toBe('SIGKILL');
    expect(fin.steps[1].error.code).toBe('TIMEOUT');
    for (const pid of startedPids(fin.steps)) expect(fakeAgentAlive(pid)).toBe(false);
  });

  it('a parallel run over its whole-run limit: running members cancelled, queued ones skipped', async () => {
    const l = (await ok(s, 'launch', { tasks: [{ agent: 'sleeper', task: 'a' }, { agent: 'sleeper', task: 'b' }, { agent: 'echo', task: 'c' }], concurrency: 2, timeoutMs: 3000 }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('TIMEOUT');
    expect(fin.steps.map((m: any) => m.state)).toEqual(['cancelled', 'cancelled', 'skipped']);
    expect(fin.steps.slice(0, 2).map((m: any) => m.error.code)).toEqual(['TIMEOUT', 'TIMEOUT']);
    for (const pid of startedPids(fin.steps)) expect(fakeAgentAlive(pid)).toBe(false);
  });

  it('an agent over its own limit fails its step with TIMEOUT and the chain stops', async () => {
    const l = (await ok(s, 'launch', { chain: [{ agent: 'slow', task: 'x' }, { agent: 'echo', task: 'never' }] }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('TIMEOUT');
    expect(fin.error.message).toMatch(/slow exceeded its step limit of 1500 ms/);
    expect(fin.steps.map((x: any) => x.state)).toEqual(['failed', 'skipped']);
    expect(fin.steps[0]).toMatchObject({ signal: 'SIGTERM', error: { code: 'TIMEOUT' } });
    expect(fakeAgentAlive(fin.steps[0].pid)).toBe(false);
  });

  it('a group member over its own limit: its siblings finish (no failFast), the group and the run fail TIMEOUT', async () => {
    const l = (await ok(s, 'launch', { chain: [{ parallel: [{ agent: 'slow', task: 'x' }, { agent: 'echo', task: 'ok' }] }, { agent: 'echo', task: 'never' }] }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('TIMEOUT');
    expect(fin.steps[0].state).toBe('failed');
    expect(fin.steps[0].error.code).toBe('TIMEOUT');
    expect(fin.steps[0].members.map((m: any) => m.state)).toEqual(['failed', 'completed']);
    expect(fin.steps[1].state).toBe('skipped');
  });

  it('refuses a whole-run limit above SUBAGENTS_MAX_TIMEOUT_MS', async () => {
    const r = await s.call('launch', { chain: [{ agent: 'echo', task: 'x' }], timeoutMs: 14_400_001 });
    expect(textOf(r)).toMatch(/^INVALID_INPUT: .*14400000/);
  });
});
