import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { CAT, waitStatus, ok } from '../helpers/runs.js';
import { startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

describe.concurrent('append: steps added to a running chain', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let gates = 0;
  beforeAll(async () => {
    t = tempStateHome('sa-append-');
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'echo', { backend: 'command', command: [CAT] });
    writeAgent(dir, 'fail', { backend: 'command', command: ['/bin/sh', '-c', 'echo bye; exit 1'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  /** An agent that holds its step open until `open()` is called (it waits for a file), then echoes its task. */
  function gate(): { agent: string; open: () => void } {
    const file = path.join(t.base, `gate-${gates}`);
    const agent = `gate-${gates++}`;
    writeAgent(path.join(t.home, 'agents'), agent, { backend: 'command', command: ['node', FAKE, 'gate', file] });
    return { agent, open: () => fs.writeFileSync(file, '') };
  }

  it('runs several appends after the queued steps, in acceptance order, with {previous}; pendingAppends and stepIndex follow', async () => {
    const g = gate();
    const l = (await ok(s, 'launch', { chain: [{ agent: g.agent, task: 'g0' }, { agent: 'echo', task: 's1 {previous}' }] }));
    expect(l.fanout.used).toBe(2);
    const a1 = await ok(s, 'append', { runId: l.runId, step: { agent: 'echo', task: 'A {previous}' } });
    expect(a1).toEqual({ sessionId: l.sessionId, runId: l.runId, stepIndex: 2, pendingAppends: 1, fanout: { used: 3, limit: 64, remaining: 61 } });
    const a2 = (await ok(s, 'append', { runId: l.runId, step: { parallel: [{ agent: 'echo', task: 'B1 {previous}' }, { agent: 'echo', task: 'B2' }], concurrency: 1 } }));
    expect(a2).toMatchObject({ stepIndex: 3, pendingAppends: 2, fanout: { used: 5, remaining: 59 } });
    const a3 = (await ok(s, 'append', { runId: l.runId, step: { agent: 'echo', task: 'C {previous}' } }));
    expect(a3).toMatchObject({ stepIndex: 4, pendingAppends: 3, fanout: { used: 6 } });

    // The gate agent holds step 0 open; it shows running once its process is recorded (under a loaded suite that can
    // come after the three appends).
    const mid = await waitStatus(s, l.runId, (v) => v.steps[0].state === 'running');
    expect(mid.state).toBe('running');
    expect(mid.pendingAppends).toBe(3);
    expect(mid.steps.map((x: any) => [x.index, x.agent, x.state])).toEqual([
      [0, g.agent, 'running'], [1, 'echo', 'pending'], [2, 'echo', 'pending'], [3, 'parallel', 'pending'], [4, 'echo', 'pending'],
    ]);
    expect(mid.steps[3].members.map((m: any) => [m.index, m.state])).toEqual([[0, 'pending'], [1, 'pending']]);

    g.open();
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');
    expect(fin.pendingAppends).toBe(0);
    expect(fin.steps.map((x: any) => x.state)).toEqual(['completed', 'completed', 'completed', 'completed', 'completed']);
    const texts = fin.steps.map((x: any) => x.output.text);
    expect(texts[1]).toBe('s1 g0');
    expect(texts[2]).toBe('A s1 g0');
    expect(fin.steps[3].members.map((m: any) => m.output.text)).toEqual(['B1 A s1 g0', 'B2']);
    expect(texts[4]).toBe('C ### echo #0\n\nB1 A s1 g0\n\n### echo #1\n\nB2');
    expect(fin.output.text).toBe(texts[4]);
    for (let i = 1; i < fin.steps.length; i++) {
      expect(Date.parse(fin.steps[i].startedAt)).toBeGreaterThanOrEqual(Date.parse(fin.steps[i - 1].endedAt));
    }
    expect(fin.fanout).toEqual({ used: 6, limit: 64, remaining: 58 });
  });

  it('accepted appends of a run that is then cancelled show as skipped, never vanish', async () => {
    const g = gate();
    const l = (await ok(s, 'launch', { chain: [{ agent: g.agent, task: 'held' }] }));
    expect((await ok(s, 'append', { runId: l.runId, step: { agent: 'echo', task: 'x' } })).stepIndex).toBe(1);
    expect((await ok(s, 'append', { runId: l.runId, step: { parallel: [{ agent: 'echo', task: 'y' }, { agent: 'echo', task: 'z' }] } })).stepIndex).toBe(2);
    await waitStatus(s, l.runId, (v) => v.steps[0].pid !== null);
    expect((await ok(s, 'cancel', { runId: l.runId })).state).toBe('cancelled');
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('cancelled');
    expect(fin.steps.map((x: any) => [x.index, x.state])).toEqual([[0, 'cancelled'], [1, 'skipped'], [2, 'skipped']]);
    expect(fin.steps[2].members.map((m: any) => m.state)).toEqual(['skipped', 'skipped']);
    expect(fin.pendingAppends).toBe(0);
    expect(fin.fanout.used).toBe(1);
    const late = await s.call('append', { runId: l.runId, step: { agent: 'echo', task: 'late' } });
    expect(textOf(late)).toMatch(/^RUN_NOT_ACTIVE: .*cancelled/);
  });

  it('accepted appends of a chain whose step fails are skipped', async () => {
    const g = gate();
    const l = (await ok(s, 'launch', { chain: [{ agent: g.agent, task: 'held' }, { agent: 'fail', task: 'f' }] }));
    expect((await ok(s, 'append', { runId: l.runId, step: { agent: 'echo', task: 'x' } })).stepIndex).toBe(2);
    g.open();
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('failed');
    expect(fin.steps.map((x: any) => x.state)).toEqual(['completed', 'failed', 'skipped']);
    expect(fin.fanout.used).toBe(2);
  });

  it('refuses: finished runs RUN_NOT_ACTIVE, single and parallel runs NOT_A_CHAIN, unknown runs RUN_NOT_FOUND, bad steps', async () => {
    const step = { agent: 'echo', task: 'x' };
    const done = (await ok(s, 'launch', { chain: [{ agent: 'echo', task: 'quick' }] }));
    await waitTerminal(s, done.runId);
    const failed = (await ok(s, 'launch', { chain: [{ agent: 'fail', task: 'quick' }] }));
    await waitTerminal(s, failed.runId);
    const single = (await ok(s, 'launch', { agent: 'echo', task: 'x' }));
    const parallel = (await ok(s, 'launch', { tasks: [{ agent: 'echo', task: 'x' }] }));
    const expectRefused = async (args: Record<string, unknown>, re: RegExp) => {
      const r = await s.call('append', args);
      expect(r.isError, JSON.stringify(args)).toBe(true);
      expect(r.structuredContent).toBeUndefined();
      expect(textOf(r), JSON.stringify(args)).toMatch(re);
    };
    await expectRefused({ runId: done.runId, step }, /^RUN_NOT_ACTIVE: .*completed/);
    await expectRefused({ runId: failed.runId, step }, /^RUN_NOT_ACTIVE: .*failed/);
    await expectRefused({ runId: single.runId, step }, /^NOT_A_CHAIN: /);
    await expectRefused({ runId: parallel.runId, step }, /^NOT_A_CHAIN: /);
    await expectRefused({ runId: 'r-AAAAAAAAAAAAAAAAAAAAAAAA', step }, /^RUN_NOT_FOUND: /);
    await expectRefused({ runId: '../../etc', step }, /^RUN_NOT_FOUND: /);
    await expectRefused({ step }, /^INVALID_INPUT: /);

    const g = gate();
    const live = (await ok(s, 'launch', { chain: [{ agent: g.agent, task: 'held' }] }));
    await expectRefused({ runId: live.runId }, /^INVALID_INPUT: /);
    await expectRefused({ runId: live.runId, step: { agent: 'echo' } }, /^INVALID_INPUT: /);
    await expectRefused({ runId: live.runId, step: { agent: 'echo', task: 'x', parallel: [step] } }, /^INVALID_INPUT: /);
    await expectRefused({ runId: live.runId, step: { agent: 'echo', task: 'x', failFast: true } }, /^INVALID_INPUT: /);
    await expectRefused({ runId: live.runId, step: { agent: 'nope', task: 'x' } }, /^UNKNOWN_AGENT: /);
    await expectRefused({ runId: live.runId, step: { parallel: [step, { agent: 'nope', task: 'x' }] } }, /^UNKNOWN_AGENT: /);
    // Nothing refused was recorded or claimed.
    const v = (await ok(s, 'status', { runId: live.runId }));
    expect(v.pendingAppends).toBe(0);
    expect(v.steps).toHaveLength(1);
    expect(v.fanout.used).toBe(1);
    g.open();
    expect((await waitTerminal(s, live.runId)).state).toBe('completed');
    await waitTerminal(s, single.runId);
    await waitTerminal(s, parallel.runId);
  });

  it('claims the tree\'s fan-out budget at acceptance, all or nothing: FANOUT_EXHAUSTED when it does not fit', async () => {
    // A second server over the same home with a budget of 4 agent starts per run tree.
    const s4 = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_SPAWNS_PER_RUN: '4' });
    try {
      const tooBig = await s4.call('launch', { chain: [{ agent: 'echo', task: 'a' }, { parallel: [step('b'), step('c'), step('d'), step('e')] }] });
      expect(textOf(tooBig)).toMatch(/^FANOUT_EXHAUSTED: .*4/);
      const g = gate();
      const l = (await ok(s4, 'launch', { chain: [{ agent: g.agent, task: 'held' }] }));
      expect(l.fanout).toEqual({ used: 1, limit: 4, remaining: 3 });
      const big = await s4.call('append', { runId: l.runId, step: { parallel: [step('1'), step('2'), step('3'), step('4')] } });
      expect(textOf(big)).toMatch(/^FANOUT_EXHAUSTED: .*3 of 4 .* needs 4/);
      const fits = (await ok(s4, 'append', { runId: l.runId, step: { parallel: [step('1'), step('2'), step('3')] } }));
      expect(fits).toMatchObject({ stepIndex: 1, pendingAppends: 1, fanout: { used: 4, limit: 4, remaining: 0 } });
      const over = await s4.call('append', { runId: l.runId, step: step('5') });
      expect(textOf(over)).toMatch(/^FANOUT_EXHAUSTED: .*0 of 4/);
      g.open();
      const fin = await waitTerminal(s4, l.runId);
      expect(fin.state).toBe('completed');
      expect(fin.steps).toHaveLength(2);
      expect(fin.steps[1].members.map((m: any) => m.output.text)).toEqual(['1', '2', '3']);
    } finally {
      await s4.close();
    }
    function step(task: string) { return { agent: 'echo', task }; }
  });
});
