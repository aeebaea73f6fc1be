import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { procIdentity } from '../helpers/runs.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { FAKE, ledger, pidsMentioning, readJson, runDirs, until } from './support.js';

/**
 * SPEC §6: any failure before proceed records the run failed/HANDSHAKE_FAILED with the phase, starts no agent,
 * verifies the runner gone and returns its reservation and claims. The runner is killed at each phase through the
 * SUBAGENTS_TEST_FAULT seam (it reaches the runner through the launching server's environment).
 */
describe('the runner dies or hangs during the ready/proceed handshake', () => {
  let t: ReturnType<typeof tempStateHome> | undefined;
  let s: Started | undefined;
  afterEach(async () => {
    await s?.close();
    t?.cleanup();
    s = undefined;
    t = undefined;
  });

  const cases = [
    { fault: 'before-ready', phase: /at the spawn phase: the runner exited \(signal SIGKILL\) before it reported ready/ },
    // The ready report is on disk when the runner dies: the server either finds it gone while checking it, or while proceeding.
    { fault: 'after-ready', phase: /at the (ready phase: the runner exited right after it reported ready|proceed phase: the runner exited)/ },
    { fault: 'after-proceed', phase: /at the proceed phase: the runner exited \(signal SIGKILL\) before it started the run/ },
    { fault: 'hang-before-ready', phase: /at the spawn phase: the handshake timed out \(SUBAGENTS_HANDSHAKE_TIMEOUT_MS\)/ },
  ];

  it.each(cases)('$fault: HANDSHAKE_FAILED naming the phase, no agent, nothing running, reservation returned', async ({ fault, phase }) => {
    t = tempStateHome();
    const markers = path.join(t.base, 'markers');
    writeAgent(path.join(t.home, 'agents'), 'marker', { backend: 'command', command: ['node', FAKE, 'marker', markers] });
    // No warm pool: these are a booted runner's phases (a claimed warm runner's are test/manager/warm-pool.test.ts's).
    // With one, a launch that comes after the pool's fill (a loaded machine) takes a pool runner instead.
    s = await startServer({
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_TEST_FAULT: fault, SUBAGENTS_WARM_RUNNERS: '0',
      // Generous for the dying runners (a loaded machine must not turn them into timeouts), short for the hanging one.
      SUBAGENTS_HANDSHAKE_TIMEOUT_MS: fault === 'hang-before-ready' ? '1500' : '20000',
    });
    const mark = s.received().length;
    const r = await s.call('launch', { agent: 'marker', task: 'must never run' }, { onprogress: () => {} });
    // Off the wire, not via onprogress (see Started.received).
    const progress = s.received().slice(mark).flatMap((m) => ('method' in m && m.method === 'notifications/progress' ? [(m.params as { message?: string }).message] : []));
    expect(r.isError, textOf(r)).toBe(true);
    expect(r.structuredContent).toBeUndefined();
    expect(textOf(r)).toMatch(/^HANDSHAKE_FAILED: /);
    expect(textOf(r)).toMatch(phase);
    // Progress notes only while the launch actually waits: a runner that hangs is waited for, one that dies is not.
    if (fault === 'hang-before-ready') expect(progress.some((m) => m?.startsWith('launch: spawn'))).toBe(true);

    // The run is recorded failed, with the phase, and nothing of it started.
    const dirs = runDirs(t.home);
    expect(dirs).toHaveLength(1);
    expect(textOf(r)).toContain(`run ${dirs[0]} is recorded failed`);
    const runDir = path.join(t.home, 'runs', dirs[0]!);
    const status = readJson(path.join(runDir, 'status.json'));
    expect(status.state).toBe('failed');
    expect(status.error.code).toBe('HANDSHAKE_FAILED');
    expect(status.error.message).toMatch(/phase/);
    expect(status.steps.map((x: { state: string; startedAt: string | null }) => [x.state, x.startedAt])).toEqual([['skipped', null]]);
    expect(fs.existsSync(markers)).toBe(false);
    const outDir = path.join(runDir, 'out'); // made by the runner once it has claimed the start
    expect(fs.existsSync(outDir) ? fs.readdirSync(outDir) : []).toEqual([]);

    // The runner was verified gone before the answer: no process carries the run's directory or token.
    const token = readJson(path.join(runDir, 'run.json')).runToken as string;
    expect(pidsMentioning(runDir)).toEqual([]);
    expect(pidsMentioning(token)).toEqual([]);

    // Capacity slot and fan-out claims are back.
    const l = ledger(t.home);
    expect(l.roots).toEqual({});
    expect(l.trees).toEqual({});

    // The listing shows it, and the server keeps serving.
    const list = sc((await s.call('status', {})));
    expect(list.runs).toHaveLength(1);
    expect(list.runs[0]).toMatchObject({ runId: dirs[0], state: 'failed', error: { code: 'HANDSHAKE_FAILED' } });
    expect(list.capacity.active).toBe(0);
    const byId = await s.call('status', { runId: dirs[0] });
    expect(byId.isError).toBeFalsy();
    expect(sc(byId).state).toBe('failed');
    expect((await s.call('agents')).isError).toBeFalsy();
  });

  it('the client cancels the launch during the handshake: recorded HANDSHAKE_FAILED, runner gone, slot back', async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_TEST_FAULT: 'hang-before-ready', SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '30000', SUBAGENTS_WARM_RUNNERS: '0' });
    const ac = new AbortController();
    const launch = s.call('launch', { agent: 'echo', task: 'never starts' }, {
      signal: ac.signal,
      onprogress: (p) => { if ((p as { message?: string }).message?.startsWith('launch: spawn')) ac.abort(); },
    }).then(() => 'answered', (e: Error) => e.message);
    expect(await launch).toMatch(/abort|cancel/i);
    // The server records the abandonment on its own after the cancel notification: wait for it through the listing.
    let run: Record<string, any> | undefined;
    for (let i = 0; i < 100 && run?.state !== 'failed'; i++) {
      run = sc(await s.call('status', {})).runs[0];
      if (run?.state !== 'failed') await new Promise((r) => setTimeout(r, 100));
    }
    expect(run).toMatchObject({ state: 'failed', error: { code: 'HANDSHAKE_FAILED' } });
    expect(run!.error.message).toMatch(/spawn phase: the launch was cancelled/);
    // The failure is recorded first (so the runner can no longer claim the start), then the runner is stopped and
    // the reservation returned: both follow within a bound.
    const runDir = path.join(t.home, 'runs', run!.runId);
    expect(await until(() => pidsMentioning(runDir).length === 0, 5000)).toBe(true);
    expect(await until(() => Object.keys(ledger(t.home).roots).length === 0 && Object.keys(ledger(t.home).trees).length === 0, 5000)).toBe(true);
  });

  it('binds the reservation to the process it started (pid and start time) before ready, and still returns it when ready never comes', async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_TEST_FAULT: 'hang-before-ready', SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '4000', SUBAGENTS_WARM_RUNNERS: '0' });
    const launch = s.call('launch', { agent: 'echo', task: 'never starts' });
    // The runner hangs before ready: whatever is bound now was bound during its boot.
    expect(await until(() => runDirs(t!.home).length === 1 && Object.values(ledger(t!.home).roots).some((r: any) => r.runner !== null), 3000)).toBe(true);
    const runId = runDirs(t.home)[0]!;
    const bound = ledger(t.home).roots[runId].runner as { pid: number; startTime: string };
    expect(procIdentity(bound.pid)).toEqual(bound);
    expect(pidsMentioning(path.join(t.home, 'runs', runId))).toContain(bound.pid);
    const r = await launch;
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^HANDSHAKE_FAILED: .*spawn phase: the handshake timed out/);
    expect(ledger(t.home).roots).toEqual({});
    expect(ledger(t.home).trees).toEqual({});
    expect(await until(() => pidsMentioning(path.join(t!.home, 'runs', runId)).length === 0, 5000)).toBe(true);
  });
});
