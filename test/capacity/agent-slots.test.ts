import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, textOf, waitTerminal } from '../helpers/server.js';
import { FAKE, readLedger, readRun, serversOn, until } from '../nesting/tree-helpers.js';

/** The most `peers` holders each member saw at once (each writes what it saw to <dir>/<pid>.max). */
function maxSeen(dir: string): number[] {
  return fs.readdirSync(dir).filter((n) => n.endsWith('.max')).map((n) => Number(fs.readFileSync(path.join(dir, n), 'utf8')));
}

/** Samples the ledger's agent slots until stopped; the most seen at once. */
function watchSlots(home: string): { stop: () => Promise<{ max: number; samples: number }> } {
  let running = true;
  let max = 0;
  let samples = 0;
  const loop = (async () => {
    while (running) {
      max = Math.max(max, Object.keys(readLedger(home).agents).length);
      samples++;
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  return { stop: async () => { running = false; await loop; return { max, samples }; } };
}

const emptyLedger = (home: string) => { const l = readLedger(home); return !Object.keys(l.roots).length && !Object.keys(l.trees).length && !Object.keys(l.agents).length; };

/**
 * SUBAGENTS_MAX_AGENTS for top-level runs: a parallel group's members wait for an agent slot rather than fail (only
 * a nested launch is refused, see test/nesting). `peers` members each wait to see more holders than the cap allows
 * (giving up after waitMs): a member that started beside one it should have waited for records it.
 */
describe('top-level group members wait for an agent slot', () => {
  let t: ReturnType<typeof tempStateHome>;
  const start = serversOn(() => t);
  const peersAgent = (): string => {
    const dir = path.join(t.base, 'peers');
    writeAgent(path.join(t.home, 'agents'), 'peers', { backend: 'command', command: ['node', FAKE, 'peers', dir] });
    return dir;
  };

  it.each([
    { maxAgents: 1, members: 2 },
    { maxAgents: 2, members: 3 },
  ])('max agents $maxAgents, a parallel run of $members: all complete, never more than $maxAgents alive at once', async ({ maxAgents, members }) => {
    t = tempStateHome();
    const dir = peersAgent();
    const s = await start({ SUBAGENTS_MAX_AGENTS: String(maxAgents) });
    const task = JSON.stringify({ target: members, waitMs: 1500, lingerMs: 100 });
    const slots = watchSlots(t.home);
    const l = await s.call('launch', { tasks: Array.from({ length: members }, () => ({ agent: 'peers', task })), concurrency: members });
    expect(l.isError, textOf(l)).toBeFalsy();
    const fin = await waitTerminal(s, sc(l).runId);
    const seen = await slots.stop();
    expect(fin.state).toBe('completed');
    expect(fin.steps.map((m: any) => [m.state, m.exitCode])).toEqual(Array.from({ length: members }, () => ['completed', 0]));
    // Waiting is not failing: every member ran, and the cap was used (not just one at a time) but never passed.
    const perMember = maxSeen(dir);
    expect(perMember).toHaveLength(members);
    expect(Math.max(...perMember)).toBe(maxAgents);
    expect(seen.samples).toBeGreaterThan(0);
    expect(seen.max).toBeLessThanOrEqual(maxAgents);
    await until(() => emptyLedger(t.home), 'every agent slot back');
  });

  it('members wait for a slot another run holds (the cap is per state home, not per run)', async () => {
    t = tempStateHome();
    const dir = peersAgent();
    const s = await start({ SUBAGENTS_MAX_AGENTS: '1' });
    // Every agent, the holder's and the members', looks for a second one alive beside it.
    const task = JSON.stringify({ target: 2, waitMs: 1500, lingerMs: 100 });
    const holder = await s.call('launch', { agent: 'peers', task });
    expect(holder.isError, textOf(holder)).toBeFalsy();
    const holderId = sc(holder).runId as string;
    await until(() => readRun(t.home, holderId).status.steps[0].state === 'running', 'the holder running');
    // Admitted (run capacity is not the agent cap); its members wait for the holder's slot.
    const l = await s.call('launch', { tasks: [{ agent: 'peers', task }, { agent: 'peers', task }] });
    expect(l.isError, textOf(l)).toBeFalsy();
    const fin = await waitTerminal(s, sc(l).runId);
    const held = await waitTerminal(s, holderId);
    expect([held.state, fin.state]).toEqual(['completed', 'completed']);
    expect(maxSeen(dir)).toEqual([1, 1, 1]);
    await until(() => emptyLedger(t.home), 'every agent slot back');
  });

  it("a single run's slot is reserved by its launch and held by its runner, with its agent; one launched at a full home waits", async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    const s = await start({ SUBAGENTS_MAX_AGENTS: '1' });
    const first = await s.call('launch', { agent: 'sleeper', task: 'hold the slot' });
    expect(first.isError, textOf(first)).toBeFalsy();
    const firstId = sc(first).runId as string;
    // The reserved key, bound to the runner at the handshake, now names the agent too (no second slot was taken).
    await until(() => readRun(t.home, firstId).status.steps[0].process != null, 'the first agent started');
    const runner = readRun(t.home, firstId).status.runner;
    await until(() => readLedger(t.home).agents[`${firstId}:reserved:0`]?.agent != null, 'the agent recorded in its slot');
    const slots = readLedger(t.home).agents;
    expect(Object.keys(slots)).toEqual([`${firstId}:reserved:0`]);
    expect(slots[`${firstId}:reserved:0`]!.runner).toEqual({ pid: runner.pid, startTime: runner.startTime });
    // No free slot at its launch: nothing reserved, and its runner waits for the first run's slot.
    const second = await s.call('launch', { agent: 'echo', task: 'wait for the slot' });
    expect(second.isError, textOf(second)).toBeFalsy();
    const secondId = sc(second).runId as string;
    expect(Object.keys(readLedger(t.home).agents).some((k) => k.startsWith(`${secondId}:`))).toBe(false);
    expect(readRun(t.home, secondId).status.steps[0].state).toBe('pending');
    expect(sc(await s.call('cancel', { runId: firstId })).state ?? 'cancelled').toBeTruthy();
    const [a, b] = [await waitTerminal(s, firstId), await waitTerminal(s, secondId)];
    expect([a.state, b.state]).toEqual(['cancelled', 'completed']);
    await until(() => emptyLedger(t.home), 'every agent slot back');
  });
});
