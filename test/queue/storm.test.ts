import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { until } from '../nesting/tree-helpers.js';
import { isAlive } from '../../src/process/identity.js';
import { queueLedger, stepStarts } from './queue-helpers.js';

const CAP = 2;
const SERVERS = 3;
const PER_SERVER = 8;

/** Runs whose status says running with a live runner: what must never exceed the cap. */
function liveRuns(home: string): number {
  let n = 0;
  let names: string[] = [];
  try { names = fs.readdirSync(path.join(home, 'runs')).filter((x) => x.startsWith('r-')); } catch { return 0; }
  for (const id of names) {
    try {
      const s = JSON.parse(fs.readFileSync(path.join(home, 'runs', id, 'status.json'), 'utf8'));
      if (s.state === 'running' && isAlive(s.runner)) n++;
    } catch { /* mid-write or not there yet */ }
  }
  return n;
}

/**
 * Several servers launch and cancel against a small cap with a long queue, for a bounded number of launches. Sampled
 * live runs never exceed the cap; every accepted run ends completed, cancelled or failed/QUEUE_TIMEOUT.
 */
describe('a queue storm', () => {
  let t: ReturnType<typeof tempStateHome>;
  const servers: Started[] = [];
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'nap', { backend: 'command', command: ['sh', '-c', 'read -r x; sleep 0.15; echo ok'] });
    for (let i = 0; i < SERVERS; i++) {
      servers.push(await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: String(CAP), SUBAGENTS_MAX_QUEUED: '64' }));
    }
  });
  afterAll(async () => {
    for (const s of servers) await s.close();
    t.cleanup();
  });

  it('keeps capacity exact and ends every accepted run visibly', async () => {
    let maxLive = 0;
    let maxRoots = 0;
    let sampling = true;
    const sampler = (async () => {
      while (sampling) {
        maxLive = Math.max(maxLive, liveRuns(t.home));
        maxRoots = Math.max(maxRoots, Object.keys(queueLedger(t.home).roots).length);
        await new Promise((r) => setTimeout(r, 15));
      }
    })();
    const accepted: Array<{ server: Started; runId: string }> = [];
    let queuedAtLaunch = 0;
    await Promise.all(servers.map(async (s, si) => {
      for (let i = 0; i < PER_SERVER; i++) {
        // Every third launch may time out in the queue; every fourth accepted one is cancelled a moment later.
        const r = await s.call('launch', { agent: 'nap', task: `${si}-${i}`, ...(i % 3 === 2 ? { queueTimeoutMs: 400 } : {}) });
        expect(r.isError, textOf(r)).toBeFalsy();
        const v = sc(r);
        expect(['queued', 'running', 'completed']).toContain(v.state);
        accepted.push({ server: s, runId: v.runId });
        if (v.state === 'queued') queuedAtLaunch++;
        if (i % 4 === 3) {
          const c = await s.call('cancel', { runId: v.runId });
          expect(c.isError, textOf(c)).toBeFalsy();
        }
      }
    }));
    const ends = await Promise.all(accepted.map(({ server, runId }) => waitTerminal(server, runId, 120_000)));
    sampling = false;
    await sampler;
    for (const [i, e] of ends.entries()) {
      const ok = e.state === 'completed' || e.state === 'cancelled' || (e.state === 'failed' && e.error?.code === 'QUEUE_TIMEOUT');
      expect(ok, `${accepted[i]!.runId}: ${e.state} ${JSON.stringify(e.error)}`).toBe(true);
      if (e.state === 'completed') expect(stepStarts(t.home, accepted[i]!.runId)).toBe(1);
      if (e.error?.code === 'QUEUE_TIMEOUT') expect(stepStarts(t.home, accepted[i]!.runId)).toBe(0);
    }
    expect(maxLive).toBeLessThanOrEqual(CAP);
    expect(maxRoots).toBeLessThanOrEqual(CAP);
    expect(ends.filter((e) => e.state === 'completed').length).toBeGreaterThan(0);
    expect(queuedAtLaunch).toBeGreaterThan(CAP); // the storm did go through the queue
    await until(() => Object.keys(queueLedger(t.home).roots).length === 0 && Object.keys(queueLedger(t.home).queue).length === 0, 'the ledger empty', 30_000);
  });
});
