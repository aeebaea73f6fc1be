import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

describe('a single run end to end', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
  });
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  it('launch → status(waitMs) → completed with the agent output', async () => {
    const r = await s.call('launch', { agent: 'echo', task: 'hello from the test' });
    expect(r.isError).toBeFalsy();
    const l = sc(r);
    expect(l.runId).toMatch(/^r-/);
    expect(l.state).toBe('running');
    expect(l.capacity).toEqual({ active: 1, limit: 8 });
    expect(l.fanout).toEqual({ used: 1, limit: 64, remaining: 63 });
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('hello from the test');
    expect(fin.steps[0].exitCode).toBe(0);
    expect(fin.steps[0].pid).toBeGreaterThan(0);
  });

  it('answers INVALID_INPUT for malformed arguments and keeps serving', async () => {
    const r = await s.call('launch', { agent: 'echo' });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^INVALID_INPUT: /);
    expect(r.structuredContent).toBeUndefined();
    const r2 = await s.call('launch', { agent: 'echo', task: 'x', bogus: 1 });
    expect(textOf(r2)).toMatch(/^INVALID_INPUT: .*bogus/);
    const ok = await s.call('status', {});
    expect(ok.isError).toBeFalsy();
  });
});
