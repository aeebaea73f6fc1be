import fs from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, textOf, waitTerminal } from '../helpers/server.js';
import { DELEGATE, FAKE, readLedger, readRun, runIds, serversOn, until } from '../nesting/tree-helpers.js';

/** What a torn write leaves: the start of a ledger, cut. */
const TORN = '{"v":1,"roots":{"r-';
const corrupt = (home: string) => fs.writeFileSync(path.join(home, 'ledger.json'), TORN, { mode: 0o600 });

describe('a ledger that does not parse is rebuilt from the runs of the state home', () => {
  let t: ReturnType<typeof tempStateHome>;
  const start = serversOn(() => t);

  it('keeps an active run\'s capacity slot, its agent slot and its tree budget: a launch beyond capacity is still refused, and the run\'s release still works', async () => {
    t = tempStateHome();
    const gate = path.join(t.base, 'gate');
    writeAgent(path.join(t.home, 'agents'), 'gate', { backend: 'command', command: ['node', FAKE, 'gate', gate] });
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    const s = await start({ SUBAGENTS_MAX_ACTIVE_RUNS: '1' });
    const l = await s.call('launch', { agent: 'gate', task: 'held' });
    expect(l.isError, textOf(l)).toBeFalsy();
    const runId = sc(l).runId as string;
    // Its agent runs and the ledger names it (the slot a rebuild must find again; held under the step's key, or under
    // the key its launch reserved it by).
    const slotOf = () => Object.entries(readLedger(t.home).agents).find(([k]) => k.startsWith(`${runId}:`))?.[1] as { agent?: unknown } | undefined;
    await until(() => slotOf()?.agent != null, 'the agent slot bound to the agent');
    const { status, record } = readRun(t.home, runId);

    corrupt(t.home);
    // A lock-free snapshot rebuilds too: status still shows the run's budget and the home's capacity.
    const st = await s.call('status', { runId });
    expect(sc(st).fanout).toEqual({ used: 1, limit: record.limits.maxSpawns, remaining: record.limits.maxSpawns - 1 });
    const list = await s.call('status', {});
    expect(sc(list).capacity).toEqual({ active: 1, limit: 1, queued: 0 });

    const refused = await s.call('launch', { agent: 'echo', task: 'over capacity', queue: false });
    expect(refused.isError).toBe(true);
    expect(textOf(refused)).toMatch(/^CAPACITY_EXHAUSTED: 1 of 1 active runs/);
    expect(runIds(t.home)).toEqual([runId]);
    // The refused launch's section wrote the rebuilt ledger back.
    const rebuilt = JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8'));
    expect(Object.keys(rebuilt.roots)).toEqual([runId]);
    expect(rebuilt.roots[runId].runner).toEqual(status.runner);
    expect(rebuilt.trees[runId]).toEqual({ used: 1, limit: record.limits.maxSpawns, maxDepth: record.limits.maxDepth });
    expect(Object.keys(rebuilt.agents)).toEqual([`${runId}:0`]);
    expect(rebuilt.agents[`${runId}:0`]).toMatchObject({ runner: status.runner, agent: status.steps[0].process, root: runId });

    // The run ends normally and returns what the rebuild restored: the next launch fits.
    fs.writeFileSync(gate, '');
    expect((await waitTerminal(s, runId)).state).toBe('completed');
    await until(() => { const x = readLedger(t.home); return !Object.keys(x.roots).length && !Object.keys(x.trees).length && !Object.keys(x.agents).length; }, 'an empty ledger');
    const again = await s.call('launch', { agent: 'echo', task: 'next' });
    expect(again.isError, textOf(again)).toBeFalsy();
    expect((await waitTerminal(s, sc(again).runId)).state).toBe('completed');
  });

  it('keeps a live tree: a nested launch after the rebuild is admitted and charged to the tree\'s recorded budget', async () => {
    t = tempStateHome();
    const readyFile = path.join(t.base, 'ready');
    const goFile = path.join(t.base, 'go');
    writeAgent(path.join(t.home, 'agents'), 'delegate', { backend: 'command', command: ['node', DELEGATE, 'delegate'] });
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    const s = await start({ SUBAGENTS_MAX_SPAWNS_PER_RUN: '5' });
    const plan = { readyFile, goFile, launches: [{ agent: 'echo', task: 'nested' }], wait: true };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;
    await until(() => fs.existsSync(readyFile), 'the delegating agent connected to its nested server');

    corrupt(t.home);
    fs.writeFileSync(goFile, '');
    const fin = await waitTerminal(s, rootId);
    expect(fin.state).toBe('completed');
    const out = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', rootId, 'out', 'run.txt'), 'utf8'));
    // Not RUN_NOT_ACTIVE (the tree forgotten): admitted, charged after the root's own claim, within the limit of 5.
    expect(out.results[0].isError, out.results[0].text).toBe(false);
    expect(out.results[0].structured.fanout).toEqual({ used: 2, limit: 5, remaining: 3 });
    expect(out.finals[0].state).toBe('completed');
    await until(() => { const x = readLedger(t.home); return !Object.keys(x.roots).length && !Object.keys(x.agents).length; }, 'every slot back');
  });
});
