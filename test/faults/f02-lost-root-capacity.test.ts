/**
 * F2 — a lost root whose tree outlived it. The root's runner is SIGKILLed while three nested runs live: the root is
 * recorded RUNNER_LOST and keeps its capacity slot while its tree lives (right: those agents still run), the nested
 * runs end PARENT_ENDED. Then nothing freed the slot: the sweep looks only at non-terminal runs, so `status {}` said
 * `capacity 1 of 1` with no active run for as long as nobody launched.
 * Expect: once the last nested run has ended, a listing (and the sweep) returns the slot, and the capacity it shows
 * agrees with the runs it lists.
 */
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, textOf } from '../helpers/server.js';
import { DELEGATE, FAKE, readRun, runIds, serversOn, until } from '../nesting/tree-helpers.js';
import { sleep } from './fault-helpers.js';

const TERMINAL = ['completed', 'failed', 'cancelled'];

describe.skipIf(process.platform !== 'linux')('F2 a lost root whose tree outlived it', () => {
  let t: ReturnType<typeof tempStateHome>;
  const start = serversOn(() => t);

  it('the slot comes back once the tree has ended, without a launch; the listing agrees', async () => {
    t = tempStateHome();
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'delegate', { backend: 'command', command: ['node', DELEGATE, 'delegate'] });
    writeAgent(dir, 'slow', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    const s = await start({ SUBAGENTS_MAX_ACTIVE_RUNS: '1' });
    const plan = { launches: [1, 2, 3].map((i) => ({ agent: 'slow', task: `child ${i}` })), wait: false, sleepMs: 120_000 };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;
    const nested = () => runIds(t.home).filter((id) => id !== rootId);
    await until(() => nested().length === 3 && nested().every((id) => { try { return readRun(t.home, id).status.steps[0].state === 'running'; } catch { return false; } }), 'three nested runs with running agents', 60_000);

    process.kill(readRun(t.home, rootId).status.runner.pid, 'SIGKILL');
    let lost: Record<string, any> = {};
    for (let i = 0; i < 100 && lost.state !== 'failed'; i++) {
      lost = sc(await s.call('status', { runId: rootId }));
      if (lost.state !== 'failed') await sleep(100);
    }
    expect(lost.state).toBe('failed');
    expect(lost.error.code).toBe('RUNNER_LOST');
    await until(() => nested().every((id) => TERMINAL.includes(readRun(t.home, id).status.state)), 'every nested run terminal', 60_000);
    for (const id of nested()) expect(readRun(t.home, id).status.error?.code).toBe('PARENT_ENDED');

    // No launch from here on: only listings. Their capacity must come to agree with their runs (none active).
    let last: Record<string, any> = {};
    const agreed = await (async () => {
      const end = Date.now() + 15_000;
      while (Date.now() < end) {
        const r = await s.call('status', {});
        last = sc(r);
        const active = (last.runs as Array<{ state: string }>).filter((x) => !TERMINAL.includes(x.state)).length;
        if (active === 0 && last.capacity.active === 0) return true;
        await sleep(250);
      }
      return false;
    })();
    expect(agreed, `capacity ${JSON.stringify(last.capacity)} with runs ${JSON.stringify((last.runs ?? []).map((x: any) => x.state))}`).toBe(true);
  }, 180_000);
});
