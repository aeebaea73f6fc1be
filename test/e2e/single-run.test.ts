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

  it('sends progress notes only while a call waits, never just before its answer, and none when it answers at once', async () => {
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '2500'] });
    // Read off the wire (see Started.received): what the server sent before each answer, in order, with when it arrived.
    const arrivals: Array<{ at: number; m: unknown }> = [];
    const deliver = s.transport.onmessage;
    s.transport.onmessage = (m, extra) => { arrivals.push({ at: performance.now(), m }); deliver?.(m, extra); };
    const progressOf = (from: number) => arrivals.slice(from).filter((a) => {
      const m = a.m as { method?: string };
      return m.method === 'notifications/progress';
    });
    const answerOf = (from: number) => arrivals.slice(from).find((a) => 'result' in (a.m as object))!;

    // A launch answers within the handshake: no note at all (the old "started" note came with the answer).
    let mark = arrivals.length;
    const r = await s.call('launch', { agent: 'sleeper', task: 'take a moment' }, { onprogress: () => {} });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(progressOf(mark)).toEqual([]);
    const runId = sc(r).runId as string;
    expect(sc(r).next).toContain(`status { runId: "${runId}", waitMs: 30000`);

    // A status that answers at once (no waitMs, or a change already there): no note.
    mark = arrivals.length;
    const now = await s.call('status', { runId }, { onprogress: () => {} });
    expect(sc(now).next).toMatch(/^Still running: call status/);
    expect(progressOf(mark)).toEqual([]);

    // A long-poll that waits: notes while it waits (seconds waited, increasing), the last one well before the answer.
    mark = arrivals.length;
    const w = await s.call('status', { runId, waitMs: 30_000, until: 'terminal' }, { onprogress: () => {} });
    const notes = progressOf(mark);
    const answer = answerOf(mark);
    const v = sc(w);
    expect(v.state).toBe('completed');
    expect(v.next).toBe('Ended completed: the run\'s output is output.text.');
    expect(v.changed).toBe(true);
    expect(notes.length).toBeGreaterThanOrEqual(1);
    const params = notes.map((n) => (n.m as { params: { progress: number; message: string } }).params);
    expect(params[0]!.message).toBe(`waiting on ${runId}`);
    expect(params.map((p) => p.progress)).toEqual([...params.map((p) => p.progress)].sort((a, b) => a - b));
    // Never in the same read as the answer: the answer follows the last note by the quiet gap (a bound, not a speed).
    expect(answer.at - notes.at(-1)!.at).toBeGreaterThan(1);

    // A finished run answers a long-poll at once, reporting that nothing changed while waiting, and sends no note.
    mark = arrivals.length;
    const again = sc(await s.call('status', { runId, waitMs: 30_000 }, { onprogress: () => {} }));
    expect(again).toMatchObject({ state: 'completed', changed: false, waitedMs: 0 });
    expect(progressOf(mark)).toEqual([]);
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
