import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { until } from '../nesting/tree-helpers.js';
import { WAIT_FOR_FILE_AGENT, ledgerRoots, liveRunners, observe } from './capacity-helpers.js';

const CAP = 2;
const POOL = 8;
const ROUNDS = 50;
/** Mostly small races (2 or 3 servers), every seventh round all eight. */
const serversInRound = (r: number) => (r % 7 === 6 ? 8 : r % 7 === 5 ? 5 : 2 + (r % 2));

describe('capacity is exact across server processes', () => {
  let t: ReturnType<typeof tempStateHome>;
  const pool: Started[] = [];
  beforeAll(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'wait', { backend: 'command', command: WAIT_FOR_FILE_AGENT });
    const env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_MAX_ACTIVE_RUNS: String(CAP), SUBAGENTS_KILL_GRACE_MS: '300' };
    pool.push(...(await Promise.all(Array.from({ length: POOL }, (_, i) => startServer(env, { name: `racer-${i}` })))));
  }, 120_000);
  afterAll(async () => {
    await Promise.all(pool.map((s) => s.close()));
    for (const pid of liveRunners(t.home)) { try { process.kill(-pid, 'SIGKILL'); } catch { /* gone */ } }
    t.cleanup();
  });

  it(`${ROUNDS} rounds of 2…8 servers launching at once against a cap of ${CAP}: never more than ${CAP} active, the rest CAPACITY_EXHAUSTED, every slot back`, async () => {
    const tally = { admitted: 0, refused: 0 };
    let maxRoots = 0;
    let maxRunners = 0;
    for (let round = 0; round < ROUNDS; round++) {
      const n = serversInRound(round);
      const racers = Array.from({ length: n }, (_, i) => pool[(round + i) % POOL]!);
      const release = path.join(t.base, `release-${round}`);
      const obs = observe(t.home);
      const T0 = Date.now();
      const results = await Promise.all(racers.map((s) => s.call('launch', { agent: 'wait', task: release, queue: false })));
      const T1 = Date.now();
      const admitted: Array<{ s: Started; runId: string }> = [];
      results.forEach((r, i) => {
        if (!r.isError) {
          expect(sc(r).capacity.active).toBeLessThanOrEqual(CAP);
          admitted.push({ s: racers[i]!, runId: sc(r).runId });
        } else {
          // Every other launch is refused for capacity, naming the numbers.
          expect(textOf(r)).toMatch(new RegExp(`^CAPACITY_EXHAUSTED: ${CAP} of ${CAP} active runs`));
        }
      });
      // No run can end before its release, so exactly min(n, cap) fit.
      expect(admitted.length, `round ${round} with ${n} servers`).toBe(Math.min(n, CAP));
      tally.admitted += admitted.length;
      tally.refused += n - admitted.length;
      fs.writeFileSync(release, '');
      for (const a of admitted) expect((await waitTerminal(a.s, a.runId)).state).toBe('completed');
      // Every slot back, every runner gone, before the next round.
      await until(() => ledgerRoots(t.home) === 0 && liveRunners(t.home).length === 0, `round ${round}: slots back and runners gone`);
      const T2 = Date.now();
      const seen = await obs.stop();
      if (process.env.RACE_TRACE) console.error(`round ${round} n=${n} launch ${T1 - T0} ms, end ${T2 - T1} ms, samples ${seen.samples}`);
      maxRoots = Math.max(maxRoots, seen.maxRoots);
      maxRunners = Math.max(maxRunners, seen.maxRunners);
      expect(seen.maxRoots, `round ${round}: active runs in the ledger`).toBeLessThanOrEqual(CAP);
      expect(seen.maxRunners, `round ${round}: live runner processes`).toBeLessThanOrEqual(CAP);
    }
    expect(maxRoots).toBe(CAP);
    expect(tally.admitted + tally.refused).toBeGreaterThan(ROUNDS * 2);
    const ledger = JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8'));
    expect(ledger.roots).toEqual({});
    expect(ledger.trees).toEqual({});
    expect(ledger.agents).toEqual({});
  }, 300_000);
});
