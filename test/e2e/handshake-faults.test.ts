import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { FAKE, ledger, pidsMentioning, readJson, runDirs } from './support.js';

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
    s = await startServer({
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_TEST_FAULT: fault,
      // Generous for the dying runners (a loaded machine must not turn them into timeouts), short for the hanging one.
      SUBAGENTS_HANDSHAKE_TIMEOUT_MS: fault === 'hang-before-ready' ? '1500' : '20000',
    });
    const progress: string[] = [];
    const r = await s.call('launch', { agent: 'marker', task: 'must never run' }, { onprogress: (p) => progress.push((p as { message?: string }).message ?? '') });
    expect(r.isError, textOf(r)).toBe(true);
    expect(r.structuredContent).toBeUndefined();
    expect(textOf(r)).toMatch(/^HANDSHAKE_FAILED: /);
    expect(textOf(r)).toMatch(phase);
    expect(progress).toContain('launch: spawn');

    // The run is recorded failed, with the phase, and nothing of it started.
    const dirs = runDirs(t.home);
    expect(dirs).toHaveLength(1);
    const runDir = path.join(t.home, 'runs', dirs[0]!);
    const status = readJson(path.join(runDir, 'status.json'));
    expect(status.state).toBe('failed');
    expect(status.error.code).toBe('HANDSHAKE_FAILED');
    expect(status.error.message).toMatch(/phase/);
    expect(status.steps.map((x: { state: string; startedAt: string | null }) => [x.state, x.startedAt])).toEqual([['skipped', null]]);
    expect(fs.existsSync(markers)).toBe(false);
    expect(fs.readdirSync(path.join(runDir, 'out'))).toEqual([]);

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
});
