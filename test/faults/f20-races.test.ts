/**
 * F20 — races between completion, cancel, dismiss and reconciliation (SPEC §6, §8.3). Two server processes share
 * one session (SUBAGENTS_SESSION_ID), so both see every run. 100 short runs by default, 200 with
 * SUBAGENTS_FAULT_RACE_ITERATIONS=200, 8 at a time; right around each run's natural end (a random 0–300 ms after launch; the agent lives 0–50 ms),
 * the two servers fire at once: cancel, dismiss { cancel: true }, dismiss, and status (which reconciles).
 * Every state any reply reports is recorded. Expect, per run: all terminal states observed are one and the same
 * (the first terminal state wins; terminal is final), it is `completed` or `cancelled` — never `failed` (a completed
 * run is never turned into failed by a racing reconcile or cancel) — and dismiss is idempotent: every dismiss that
 * did not refuse with RUN_ACTIVE succeeded, and dismissing again after the end answers the same terminal state.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { sleep } from './fault-helpers.js';

// 200 races, as the matrix asks (SUBAGENTS_FAULT_RACE_ITERATIONS scales it down for a quick local run).
const ITERATIONS = Number(process.env.SUBAGENTS_FAULT_RACE_ITERATIONS ?? 200);
const PARALLEL = 8;
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

describe('F20 races', () => {
  let t: ReturnType<typeof tempStateHome>;
  let a: Started;
  let b: Started;
  beforeAll(async () => {
    t = tempStateHome();
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'quick', { backend: 'command', command: ['true'] });
    writeAgent(agents, 'brief', { backend: 'command', command: ['sleep', '0.05'] });
    const env = {
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', SUBAGENTS_MAX_ACTIVE_RUNS: '0',
      SUBAGENTS_SESSION_ID: 'f20-race-session-0123456789',
    };
    [a, b] = await Promise.all([startServer(env), startServer(env)]);
  });
  afterAll(async () => {
    await Promise.all([a?.close(), b?.close()]);
    t.cleanup();
  });

  it(`${ITERATIONS} runs: first terminal state wins, completed never becomes failed, dismiss is idempotent`, async () => {
    const observed = new Map<string, string[]>();
    const problems: string[] = [];
    const refusedLaunches: string[] = [];
    let next = 0;
    const tally = { completed: 0, cancelled: 0, failed: 0, runActive: 0 };

    const one = async (i: number) => {
      // A refused launch (BUSY or HANDSHAKE_FAILED on an overloaded machine) is retried, as a client would.
      let l = await a.call('launch', { agent: i % 2 ? 'quick' : 'brief', task: `race ${i}` });
      for (let tries = 0; l.isError && tries < 5; tries++) {
        refusedLaunches.push(textOf(l).split(':')[0]!);
        await sleep(200);
        l = await a.call('launch', { agent: i % 2 ? 'quick' : 'brief', task: `race ${i}` });
      }
      if (l.isError) return;
      const runId = sc(l).runId as string;
      const seen: string[] = [];
      observed.set(runId, seen);
      const note = (who: string, r: Awaited<ReturnType<Started['call']>>) => {
        if (r.isError) {
          const code = textOf(r).split(':')[0]!;
          if (code === 'RUN_ACTIVE' && who.startsWith('dismiss ')) { tally.runActive++; return; }
          problems.push(`${runId} ${who}: ${textOf(r).slice(0, 160)}`);
          return;
        }
        const state = sc(r).state as string | undefined;
        if (state) seen.push(state);
        if (state === 'failed') problems.push(`${runId} ${who}: failed ${JSON.stringify(sc(r).error)}`);
      };
      await sleep(Math.floor(Math.random() * 300));
      const ops: Array<[string, Started, string, Record<string, unknown>]> = [
        ['cancel@a', a, 'cancel', { runId }],
        ['dismiss+cancel@b', b, 'dismiss', { runId, cancel: true }],
        ['dismiss @a', a, 'dismiss', { runId }],
        ['status@b', b, 'status', { runId }],
        ['status@a', a, 'status', { runId }],
      ];
      // Shuffle so no call always goes first.
      ops.sort(() => Math.random() - 0.5);
      await Promise.all(ops.map(async ([who, srv, tool, args]) => note(who, await srv.call(tool, args))));
      // Idempotent dismiss after the end, from both servers.
      for (const srv of [b, a]) note('dismiss-again', await srv.call('dismiss', { runId }));
      note('final', await a.call('status', { runId }));
    };
    const worker = async () => {
      while (next < ITERATIONS) await one(next++);
    };
    await Promise.all(Array.from({ length: PARALLEL }, worker));

    for (const [runId, seen] of observed) {
      const terminal = seen.filter((s) => TERMINAL.has(s));
      const distinct = [...new Set(terminal)];
      if (distinct.length !== 1) problems.push(`${runId}: terminal states observed ${JSON.stringify(seen)}`);
      const fin = distinct[0] as keyof typeof tally | undefined;
      if (fin) tally[fin]++;
    }
    process.stderr.write(`F20: ${observed.size} runs raced (${refusedLaunches.length} launches refused: ${[...new Set(refusedLaunches)].join(' ')}); `
      + `completed ${tally.completed}, cancelled ${tally.cancelled}, failed ${tally.failed}; dismiss refused RUN_ACTIVE ${tally.runActive} times\n`);
    expect(problems).toEqual([]);
    expect(tally.failed).toBe(0);
    expect(observed.size).toBeGreaterThanOrEqual(Math.floor(ITERATIONS * 0.95));
    // Every run ended dismissed and terminal, seen the same way by both servers.
    // (By id: a list answer carries only the newest 200 runs inline.)
    const ids = fs.readdirSync(path.join(t.home, 'runs')).filter((n) => n.startsWith('r-'));
    expect(ids.length).toBeGreaterThanOrEqual(observed.size);
    for (const id of ids) {
      const r = sc(await b.call('status', { runId: id }));
      expect(TERMINAL.has(r.state), r.runId).toBe(true);
      if (!observed.has(r.runId)) { expect(r.error?.code).toBe('HANDSHAKE_FAILED'); continue; } // a refused launch's record
      expect(r.dismissed, r.runId).toBe(true);
      expect(TERMINAL.has(r.state), r.runId).toBe(true);
      expect(r.state).toBe(observed.get(r.runId)!.filter((s) => TERMINAL.has(s))[0]);
    }
    expect(sc(await a.call('status', {})).capacity.active).toBe(0);
  }, 120_000 + ITERATIONS * 4_000); // a bound on a hang, generous for a machine shared by many test runs
});
