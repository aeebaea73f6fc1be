import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { DELEGATE, FAKE, liveRunProcesses, readLedger, report, runIds, until } from './tree-helpers.js';

const DELEGATES = 3;

/**
 * F8: several agent processes of one tree, each with its own nested server, fire nested launches at the same
 * moment against the last units of the tree's fan-out budget. Exactly the budget is admitted, batches are all or
 * nothing, and a refused batch started nothing (each started agent leaves a marker file naming its batch).
 */
describe('fan-out budget race between nested launches', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started | undefined;
  afterEach(async () => {
    await s?.close();
    for (const pid of liveRunProcesses(t.home)) { try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ } }
    t.cleanup();
  });

  it.each([
    { name: 'batches of two against 4 units left', batch: 2, perDelegate: 2, left: 4 },
    { name: 'single launches against 3 units left', batch: 1, perDelegate: 3, left: 3 },
  ])('$name: exactly the budget is admitted, refused batches start nothing', async ({ batch, perDelegate, left }) => {
    t = tempStateHome();
    const markers = path.join(t.base, 'markers');
    const gate = path.join(t.base, 'gate');
    fs.mkdirSync(gate);
    writeAgent(path.join(t.home, 'agents'), 'delegate', { backend: 'command', command: ['node', DELEGATE, 'delegate'] });
    writeAgent(path.join(t.home, 'agents'), 'marker', { backend: 'command', command: ['node', FAKE, 'marker', markers] });
    // The root's own members take DELEGATES units; `left` remain for all the nested launches together.
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', SUBAGENTS_MAX_SPAWNS_PER_RUN: String(DELEGATES + left) });
    const launchesOf = (d: number) => Array.from({ length: perDelegate }, (_, b) => {
      const label = (m: number) => `d${d}-b${b}-m${m}`;
      return batch === 1 ? { agent: 'marker', task: label(0) } : { tasks: Array.from({ length: batch }, (_, m) => ({ agent: 'marker', task: label(m) })) };
    });
    const tasks = Array.from({ length: DELEGATES }, (_, d) => ({
      agent: 'delegate',
      task: JSON.stringify({ launches: launchesOf(d), readyFile: path.join(gate, `ready-${d}`), goFile: path.join(gate, 'go'), wait: true }),
    }));
    const l = await s.call('launch', { tasks, concurrency: DELEGATES });
    expect(l.isError, textOf(l)).toBeFalsy();
    // Every delegate has its nested server connected; then all fire at once.
    await until(() => fs.readdirSync(gate).filter((n) => n.startsWith('ready-')).length === DELEGATES, 'all delegates connected', 60_000);
    fs.writeFileSync(path.join(gate, 'go'), '');
    const fin = await waitTerminal(s, sc(l).runId, 120_000);
    expect(fin.state).toBe('completed');

    const results = Array.from({ length: DELEGATES }, (_, d) => d).flatMap((d) => {
      const out = fs.readFileSync(path.join(t.home, 'runs', sc(l).runId, 'out', `0.${d}.txt`), 'utf8');
      return report(out).results.map((r, b) => ({ ...r, label: `d${d}-b${b}` }));
    });
    const admitted = results.filter((r) => !r.isError);
    const refused = results.filter((r) => r.isError);
    expect(admitted.length * batch).toBe(left);
    expect(admitted.length + refused.length).toBe(DELEGATES * perDelegate);
    for (const r of refused) expect(r.text).toMatch(/^FANOUT_EXHAUSTED: the run tree's fan-out budget has \d+ of \d+ agent starts left and this launch needs \d+; step 0 .*does not fit/);

    // Markers: exactly the admitted batches' agents started, each batch whole; no refused batch left one.
    const started = fs.readdirSync(markers).map((n) => fs.readFileSync(path.join(markers, n), 'utf8'));
    expect(started).toHaveLength(left);
    const batches = new Set(started.map((label) => label.replace(/-m\d+$/, '')));
    expect([...batches].sort()).toEqual(admitted.map((r) => r.label).sort());
    for (const b of batches) expect(started.filter((x) => x.startsWith(`${b}-`))).toHaveLength(batch);
    // A refused launch wrote no run: the root and the admitted nested runs only.
    expect(runIds(t.home)).toHaveLength(1 + admitted.length);
    expect(fin.fanout).toEqual({ used: DELEGATES + left, limit: DELEGATES + left, remaining: 0 });
    await until(() => { const x = readLedger(t.home); return !Object.keys(x.roots).length && !Object.keys(x.trees).length && !Object.keys(x.agents).length; }, 'an empty ledger');
  }, 180_000);
});
