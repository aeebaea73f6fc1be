/**
 * SPEC §6: while a server is up, a sweep reconciles every run of the state home — also runs of other sessions that
 * nobody lists — so a runner that died unobserved does not keep its run "running" and its slot held.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { loadSettings } from '../../src/config.js';
import { buildContext } from '../../src/mcp/core.js';
import { Sweeper } from '../../src/manager/sweep.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { CAT } from '../helpers/runs.js';

describe('the periodic sweep', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: [CAT] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
  });
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  it('ends another session\'s run whose runner is gone (RUNNER_LOST) and leaves finished runs alone', async () => {
    const done = sc(await s.call('launch', { agent: 'echo', task: 'finished' }));
    const lost = sc(await s.call('launch', { agent: 'echo', task: 'lost' }));
    expect((await waitTerminal(s, done.runId)).state).toBe('completed');
    expect((await waitTerminal(s, lost.runId)).state).toBe('completed');
    await s.close();
    // Make `lost` look like a run whose runner died mid-run: a pid that has exited.
    const dead = spawnSync(process.execPath, ['-e', 'process.stdout.write(String(process.pid))'], { encoding: 'utf8' });
    const file = path.join(t.home, 'runs', lost.runId, 'status.json');
    const st = JSON.parse(fs.readFileSync(file, 'utf8'));
    Object.assign(st, { state: 'running', endedAt: null, error: null, runner: { pid: Number(dead.stdout), startTime: '1' } });
    fs.writeFileSync(file, JSON.stringify(st));

    // A server of an unrelated session (it cannot see either run) sweeps the home.
    const settings = loadSettings({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '100' });
    const { ctx } = buildContext(settings, {}, () => null);
    const sweeper = new Sweeper(ctx);
    expect(await sweeper.sweepOnce()).toBe(1);
    const after = JSON.parse(fs.readFileSync(file, 'utf8'));
    expect(after.state).toBe('failed');
    expect(after.error.code).toBe('RUNNER_LOST');
    const untouched = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', done.runId, 'status.json'), 'utf8'));
    expect(untouched.state).toBe('completed');
    expect(await sweeper.sweepOnce()).toBe(0);
  });

  it('reads in slices, giving the event loop a turn between them (a first sweep of a large home held every call)', async () => {
    for (let i = 0; i < 3; i++) expect((await waitTerminal(s, sc(await s.call('launch', { agent: 'echo', task: `run ${i}` })).runId)).state).toBe('completed');
    const settings = loadSettings({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    const { ctx } = buildContext(settings, {}, () => null);
    // A slice of 0 ms: every run read after the first waits for the next turn of the loop.
    const sweeper = new Sweeper(ctx, 0);
    let turns = 0;
    let stop = false;
    const tick = () => { if (stop) return; turns++; setImmediate(tick); };
    setImmediate(tick);
    const sweep = sweeper.sweepOnce();
    const before = turns;
    expect(await sweep).toBe(0);
    stop = true;
    expect(turns - before).toBeGreaterThanOrEqual(2);
    // The same answer with the default slice.
    expect(await new Sweeper(ctx).sweepOnce()).toBe(0);
  });
});
