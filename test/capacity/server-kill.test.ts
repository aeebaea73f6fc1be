import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { readLedger, readRun, runIds, until } from '../nesting/tree-helpers.js';
import { WAIT_FOR_FILE_AGENT, liveRunners, runnerProcessesOf } from './capacity-helpers.js';

const SESSION = 'capacity-kill-session-0001';

/**
 * F4: a server SIGKILLed between its reservation and proceed (seams in launch: right after the reservation, after
 * the runner was spawned, after the reservation was bound to the ready runner). The slot must come back and no
 * half-written run may stay visible as active.
 */
describe('a server killed mid-launch', () => {
  let t: ReturnType<typeof tempStateHome>;
  let healthy: Started;
  const release = () => path.join(t.base, 'release');
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'wait', { backend: 'command', command: WAIT_FOR_FILE_AGENT });
    // The same session, so the survivor sees (and reconciles) what the dead server left.
    healthy = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_SESSION_ID: SESSION });
  });
  afterAll(async () => {
    await healthy.close();
    t.cleanup();
  });

  const killAt = async (fault: string): Promise<string | undefined> => {
    const before = new Set(runIds(t.home));
    const doomed = await startServer({
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_SESSION_ID: SESSION,
      SUBAGENTS_TEST_FAULT: fault, SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '30000',
    });
    await expect(doomed.call('launch', { agent: 'wait', task: release() })).rejects.toThrow(/Connection closed/);
    await doomed.close();
    return runIds(t.home).find((id) => !before.has(id));
  };

  /** The slot is back: the survivor's launch fits the cap of 1, and completes. */
  const slotComesBack = async () => {
    fs.rmSync(release(), { force: true });
    const r = await healthy.call('launch', { agent: 'wait', task: release() });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(r).capacity).toEqual({ active: 1, limit: 1 });
    fs.writeFileSync(release(), '');
    expect((await waitTerminal(healthy, sc(r).runId)).state).toBe('completed');
    await until(() => Object.keys(readLedger(t.home).roots).length === 0, 'the slot released by the finished run');
  };

  it('right after the reservation: nothing was written, the dead server\'s reservation is reclaimed by its identity', async () => {
    const runId = await killAt('server-after-reserve');
    expect(runId).toBeUndefined();
    // The ledger still holds the dead launcher's reservation, until the next reservation proves it dead: unbound, or
    // bound early to the warm runner it meant to claim (its launcher's all the same until the run has its proceed).
    const held = Object.values(readLedger(t.home).roots);
    expect(held).toHaveLength(1);
    if (held[0]!.runner !== null) expect(held[0]!.boundEarly).toBe(true);
    await slotComesBack();
  });

  it('after the runner was spawned: the run reconciles to failed/HANDSHAKE_FAILED, its runner is gone, the slot comes back', async () => {
    const runId = await killAt('server-after-spawn');
    expect(runId).toBeDefined();
    const list = await healthy.call('status', {});
    const mine = (sc(list).runs as Array<{ runId: string; state: string; error: { code: string } | null }>).find((r) => r.runId === runId);
    expect(mine?.state).toBe('failed');
    expect(mine?.error?.code).toBe('HANDSHAKE_FAILED');
    expect(readRun(t.home, runId!).status.steps.every((s: { state: string; startedAt: string | null }) => s.state === 'skipped' && s.startedAt === null)).toBe(true);
    // Whether or not it had reported ready when the run was reconciled, the runner is gone well before its own
    // handshake timeout (30 s here): stopped by the reconciler, or it saw the ended run and exited.
    await until(() => runnerProcessesOf(t.home, runId!).length === 0, 'the abandoned runner gone', 15_000);
    await slotComesBack();
  });

  it('after the reservation was bound to the ready runner: failed/HANDSHAKE_FAILED, the runner is stopped, the slot comes back', async () => {
    const runId = await killAt('server-after-bind');
    expect(runId).toBeDefined();
    // Bound to a live runner that was never told to proceed: held until that runner is proven gone (the survivor's
    // watcher may have reconciled the run already, and then the slot is back).
    const held = readLedger(t.home).roots[runId!];
    if (held) expect(held.runner).not.toBeNull();
    const st = await healthy.call('status', { runId });
    expect(st.isError, textOf(st)).toBeFalsy();
    expect(sc(st).state).toBe('failed');
    expect(sc(st).error.code).toBe('HANDSHAKE_FAILED');
    expect(sc(st).steps[0].state).toBe('skipped');
    await until(() => liveRunners(t.home).length === 0, 'the waiting runner stopped').catch((e) => {
      throw new Error(`${e.message}: ${liveRunners(t.home).map((p) => { try { return fs.readFileSync(`/proc/${p}/stat`, 'utf8').slice(0, 60) + ' ' + fs.readFileSync(`/proc/${p}/cmdline`, 'utf8'); } catch { return p; } }).join('; ')}`);
    });
    await slotComesBack();
    // No run of the home is left active.
    for (const id of runIds(t.home)) expect(['completed', 'failed']).toContain(readRun(t.home, id).status.state);
  });
});
