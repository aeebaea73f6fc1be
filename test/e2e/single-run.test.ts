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

  it('sends progress notifications during launch (the handshake) and during a status long-poll when given a progress token', async () => {
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '1500'] });
    // Read off the wire (see Started.received): what the server sent before each answer, in order.
    const progressBefore = (from: number) => {
      const msgs = s.received().slice(from);
      const answer = msgs.findIndex((m) => 'result' in m);
      expect(answer).toBeGreaterThanOrEqual(0);
      return msgs.slice(0, answer).flatMap((m) => ('method' in m && m.method === 'notifications/progress'
        ? [m.params as { progress: number; total?: number; message?: string }] : []));
    };
    const mark = s.received().length;
    const r = await s.call('launch', { agent: 'sleeper', task: 'take a moment' }, { onprogress: () => {} });
    expect(r.isError, textOf(r)).toBeFalsy();
    const launchProgress = progressBefore(mark);
    expect(launchProgress.map((p) => p.message)).toEqual(['launch: spawn', 'launch: ready', 'launch: started']);
    expect(launchProgress.map((p) => p.progress)).toEqual([1, 2, 3]);
    expect(launchProgress.every((p) => p.total === 3)).toBe(true);

    const runId = sc(r).runId as string;
    const waitMark = s.received().length;
    const w = await s.call('status', { runId, waitMs: 30_000, until: 'terminal' }, { onprogress: () => {} });
    const waitProgress = progressBefore(waitMark);
    const v = sc(w);
    expect(v.state).toBe('completed');
    expect(v.changed).toBe(true);
    expect(typeof v.waitedMs).toBe('number');
    expect(waitProgress.length).toBeGreaterThanOrEqual(1);
    expect(waitProgress[0]!.message).toBe(`waiting on ${runId}`);
    // Progress only ever increases.
    expect(waitProgress.map((p) => p.progress)).toEqual([...waitProgress.map((p) => p.progress)].sort((a, b) => a - b));

    // A finished run answers a long-poll at once, reporting that nothing changed while waiting.
    const again = sc(await s.call('status', { runId, waitMs: 30_000 }));
    expect(again).toMatchObject({ state: 'completed', changed: false, waitedMs: 0 });
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
