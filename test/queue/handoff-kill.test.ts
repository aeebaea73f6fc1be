import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { until } from '../nesting/tree-helpers.js';
import { WAIT_FOR_FILE_AGENT, runnerProcessesOf } from '../capacity/capacity-helpers.js';
import { queueLedger, runStarts, stepStarts } from './queue-helpers.js';

const SESSION = 'queue-handoff-kill-0001';

/**
 * The process handing a freed slot to the queue's head is SIGKILLed at each point of the hand-off (the
 * SUBAGENTS_TEST_FAULT seams of src/lifecycle/queue.ts). Here that process is the runner of the run that ended; a
 * server that lists afterwards repairs the hand-off. The queued run starts exactly once, and capacity (1) holds.
 */
describe('a hand-off killed mid-way', () => {
  let t: ReturnType<typeof tempStateHome>;
  let healthy: Started;
  const gate = (name: string) => path.join(t.base, `release-${name}`);
  const env = () => ({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_SESSION_ID: SESSION, SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '3000' });
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'wait', { backend: 'command', command: WAIT_FOR_FILE_AGENT });
    healthy = await startServer(env());
  });
  afterAll(async () => {
    await healthy.close();
    t.cleanup();
  });

  for (const point of ['handoff-after-pick', 'handoff-after-starting', 'handoff-after-spawn', 'handoff-after-bind', 'handoff-after-proceed']) {
    it(`at ${point}: the queued run still starts exactly once, and capacity is never exceeded`, async () => {
      const doomed = await startServer({ ...env(), SUBAGENTS_TEST_FAULT: point });
      const a = sc(await doomed.call('launch', { agent: 'wait', task: gate(`a-${point}`) }));
      expect(a.state).toBe('running');
      fs.writeFileSync(gate(`b-${point}`), ''); // the queued run completes as soon as its agent starts
      const b = sc(await doomed.call('launch', { agent: 'wait', task: gate(`b-${point}`) }));
      expect(b.state).toBe('queued');
      await doomed.close();

      let maxRoots = 0;
      let sampling = true;
      const sampler = (async () => {
        while (sampling) {
          maxRoots = Math.max(maxRoots, Object.keys(queueLedger(t.home).roots).length);
          await new Promise((r) => setTimeout(r, 5));
        }
      })();
      // A's runner ends its run, then dies handing the slot over.
      // No server looks meanwhile (any listing would hand the slot over itself): the runner is the one that does.
      fs.writeFileSync(gate(`a-${point}`), '');
      const stateOf = (id: string) => JSON.parse(fs.readFileSync(path.join(t.home, 'runs', id, 'status.json'), 'utf8')).state;
      await until(() => stateOf(a.runId) === 'completed' && runnerProcessesOf(t.home, a.runId).length === 0, 'A ended and its runner gone', 30_000);
      expect((await waitTerminal(healthy, a.runId)).state).toBe('completed');
      const ended = await waitTerminal(healthy, b.runId, 60_000);
      sampling = false;
      await sampler;
      expect(ended.state).toBe('completed');
      expect(stepStarts(t.home, b.runId)).toBe(1);
      expect(runStarts(t.home, b.runId)).toBe(1);
      // The kill happened where it was asked: every point before proceed leaves the start to a second attempt.
      const status = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', b.runId, 'status.json'), 'utf8'));
      expect(status.attempt).toBe(point === 'handoff-after-proceed' ? 1 : 2);
      expect(maxRoots).toBeLessThanOrEqual(1);
      await until(() => Object.keys(queueLedger(t.home).roots).length === 0 && Object.keys(queueLedger(t.home).queue).length === 0, 'the ledger empty', 20_000);
    });
  }

  it('a runner killed outright: reconciliation returns its slot and hands it to the queued run', async () => {
    const a = sc(await healthy.call('launch', { agent: 'wait', task: gate('lost-a') }));
    fs.writeFileSync(gate('lost-b'), '');
    const b = sc(await healthy.call('launch', { agent: 'wait', task: gate('lost-b') }));
    expect(b.state).toBe('queued');
    const runnerPid = sc(await healthy.call('status', { runId: a.runId })).runnerPid as number;
    process.kill(-runnerPid, 'SIGKILL'); // the runner and its agent: nobody records the end or hands the slot over
    expect(await waitTerminal(healthy, a.runId)).toMatchObject({ state: 'failed', error: { code: 'RUNNER_LOST' } });
    expect((await waitTerminal(healthy, b.runId, 60_000)).state).toBe('completed');
    expect(stepStarts(t.home, b.runId)).toBe(1);
  });

  it('a server killed after writing a queued run, before queueing it: the run ends failed/HANDSHAKE_FAILED, never starts, holds nothing', async () => {
    const a = sc(await healthy.call('launch', { agent: 'wait', task: gate('unacked-a') }));
    expect(a.state).toBe('running');
    const runs = path.join(t.home, 'runs');
    const before = new Set(fs.readdirSync(runs));
    const doomed = await startServer({ ...env(), SUBAGENTS_TEST_FAULT: 'server-before-enqueue' });
    fs.writeFileSync(gate('unacked-b'), ''); // were it ever started, it would complete at once
    const answer = await doomed.call('launch', { agent: 'wait', task: gate('unacked-b') }).then(() => 'answered', () => 'no answer');
    expect(answer).toBe('no answer');
    await doomed.close().catch(() => {});
    const orphans = fs.readdirSync(runs).filter((n) => !before.has(n) && !n.startsWith('.'));
    expect(orphans).toHaveLength(1);
    const orphan = orphans[0]!;
    expect(JSON.parse(fs.readFileSync(path.join(runs, orphan, 'status.json'), 'utf8')).state).toBe('queued');
    expect(queueLedger(t.home).queue[orphan]).toBeUndefined();
    expect(await waitTerminal(healthy, orphan, 30_000)).toMatchObject({ state: 'failed', error: { code: 'HANDSHAKE_FAILED' } });
    fs.writeFileSync(gate('unacked-a'), '');
    expect((await waitTerminal(healthy, a.runId)).state).toBe('completed');
    expect(stepStarts(t.home, orphan)).toBe(0);
    await until(() => Object.keys(queueLedger(t.home).roots).length === 0 && Object.keys(queueLedger(t.home).queue).length === 0, 'the ledger empty', 20_000);
  });
});
