/**
 * Soak: the invariants of SPEC §8 under sustained chaos, bounded by 3 minutes in all (the test's own timeout: launch
 * 95 s, settle 25 s, the final checks 10 s each). 300 short runs (SUBAGENTS_SOAK_RUNS scales it; launching stops
 * after SUBAGENTS_SOAK_SECONDS, default 95, on a machine too loaded to reach the target) are launched
 * through 4 server processes sharing one state home (2 launchers each, capacity 8), while at random: a run is
 * cancelled, a runner is SIGKILLed, and every ~60 accepted launches a server is SIGKILLed mid-traffic and replaced
 * (same session id, so it sees its runs again). Refusals (CAPACITY_EXHAUSTED, BUSY, HANDSHAKE_FAILED) are counted
 * and retried later; calls cut by a killed server are counted as unacknowledged.
 * Then, after the runs settle (listing reconciles), the invariants are checked and the counts printed:
 * - every accepted launch has its record and is terminal (or provably alive: runner identity live);
 * - every run directory in the home — acknowledged or not — is terminal;
 * - capacity is true: `capacity.active` never exceeded the limit; at the end the ledger holds no root and no agent slot
 *   (ledger roots = live non-terminal top-level runs = none);
 * - no orphans: no runner left, and no process carries any run's token;
 * - no temp files (`.*.tmp`) anywhere in the home.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { pidAlive, pidsWithArg, pidsWithToken, readRecord, sleep, tempFiles, until } from './fault-helpers.js';

const TARGET = Number(process.env.SUBAGENTS_SOAK_RUNS ?? 300);
/** Launching stops at the target or after this long, whichever comes first (a loaded machine gets fewer runs, not a hang). */
const LAUNCH_SECONDS = Number(process.env.SUBAGENTS_SOAK_SECONDS ?? 95);
/**
 * The least it must reach: a floor against a vacuous soak (everything refused), not a speed target. A 2-core machine
 * alone reaches the 300 in ~95 s; one loaded by other work reaches fewer (~210–260 at a load average of 20), and how
 * many is printed.
 */
const MIN_ACCEPTED = Math.min(TARGET, 100);
const SERVERS = 4;
const LAUNCHERS_PER_SERVER = 2;
const LIMIT = 8;
const TERMINAL = new Set(['completed', 'failed', 'cancelled']);

describe.skipIf(process.platform !== 'linux')('soak', () => {
  const t = tempStateHome('sa-soak-');
  const servers: Array<Started | null> = [];
  const all: Started[] = [];
  afterAll(async () => {
    await Promise.all(all.map((s) => s.close()));
    t.cleanup();
  });

  it(`${TARGET} runs through ${SERVERS} servers with runner, server SIGKILLs and cancels keep every invariant`, async () => {
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'short', { backend: 'command', command: ['sleep', '0.2'] });
    writeAgent(agents, 'quick', { backend: 'command', command: ['true'] });
    const sessionOf = (i: number) => `soak-session-slot-${i}-0123456789`;
    const envOf = (i: number) => ({
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', SUBAGENTS_MAX_ACTIVE_RUNS: String(LIMIT),
      SUBAGENTS_SESSION_ID: sessionOf(i),
    });
    const start = async (i: number) => { const s = await startServer(envOf(i), { name: `soak-${i}` }); all.push(s); servers[i] = s; return s; };
    await Promise.all(Array.from({ length: SERVERS }, (_, i) => start(i)));

    const accepted = new Map<string, number>();
    const refused: Record<string, number> = {};
    const c = { unacknowledged: 0, cancels: 0, runnerKills: 0, serverKills: 0, maxActive: 0, attempts: 0 };
    let restarting = Promise.resolve();
    const began = performance.now();

    const call = async (i: number, tool: string, args: Record<string, unknown>) => {
      const s = servers[i];
      if (!s) return undefined; // being replaced
      try { return await s.call(tool, args, { timeout: 15_000 }); } catch { return null; } // its server was killed
    };

    const launcher = async (i: number) => {
      while (accepted.size < TARGET && c.attempts < TARGET * 6 && performance.now() - began < LAUNCH_SECONDS * 1000) {
        await restarting;
        c.attempts++;
        const r = await call(i, 'launch', { agent: Math.random() < 0.5 ? 'short' : 'quick', task: 'soak', queue: false });
        if (r === undefined) { c.attempts--; await sleep(100); continue; }
        if (r === null) { c.unacknowledged++; await sleep(50); continue; }
        if (r.isError) {
          const code = textOf(r).split(':')[0]!;
          refused[code] = (refused[code] ?? 0) + 1;
          await sleep(code === 'CAPACITY_EXHAUSTED' ? 150 : 50);
          continue;
        }
        const runId = sc(r).runId as string;
        accepted.set(runId, i);
        c.maxActive = Math.max(c.maxActive, sc(r).capacity.active);
        const dice = Math.random();
        if (dice < 0.12) {
          await sleep(Math.floor(Math.random() * 150));
          c.cancels++;
          await call(i, 'cancel', { runId });
        } else if (dice < 0.2) {
          const st = await call(i, 'status', { runId });
          const pid = st && !st.isError ? (sc(st).runnerPid as number | null) : null;
          if (pid && pidAlive(pid)) { try { process.kill(pid, 'SIGKILL'); c.runnerKills++; } catch { /* ended */ } }
        }
      }
    };
    // A server is SIGKILLed mid-traffic and replaced every ~60 accepted launches, and at least every third of the
    // launch budget (so a slow machine gets its server kills too).
    let killedAt = 0;
    const killServer = () => {
      c.serverKills++;
      killedAt = accepted.size;
      const victim = Math.floor(Math.random() * SERVERS);
      const old = servers[victim];
      servers[victim] = null;
      if (old) { try { process.kill(old.pid, 'SIGKILL'); } catch { /* gone */ } }
      restarting = restarting.then(() => start(victim)).then(() => {});
    };
    const chaos = setInterval(() => {
      if (accepted.size - killedAt >= 60) killServer();
    }, 200);
    const timed = setInterval(killServer, Math.min(25_000, (LAUNCH_SECONDS * 1000) / 3));
    try {
      await Promise.all(Array.from({ length: SERVERS * LAUNCHERS_PER_SERVER }, (_, k) => launcher(k % SERVERS)));
    } finally {
      clearInterval(chaos);
      clearInterval(timed);
    }
    await restarting;
    const launchSecs = (performance.now() - began) / 1000;

    // Settle: a checker session adopts every slot's runs; listing reconciles them until all are terminal.
    const checker = await startServer({ ...envOf(99), SUBAGENTS_SESSION_ID: 'soak-checker-session-0123456789' });
    all.push(checker);
    const restored = await checker.call('restore', { lineage: Array.from({ length: SERVERS }, (_, i) => sessionOf(i)) });
    expect(restored.isError, textOf(restored)).toBeFalsy();
    const runIds = () => fs.readdirSync(path.join(t.home, 'runs')).filter((n) => n.startsWith('r-'));
    const stateOf = (id: string): string => { try { return JSON.parse(fs.readFileSync(path.join(t.home, 'runs', id, 'status.json'), 'utf8')).state; } catch { return 'unreadable'; } };
    const settleEnd = performance.now() + 25_000;
    for (;;) {
      const r = await checker.call('status', { all: true, waitMs: 2000 });
      expect(r.isError, textOf(r)).toBeFalsy();
      if (runIds().every((id) => TERMINAL.has(stateOf(id))) || performance.now() > settleEnd) break;
    }

    // Counts.
    const byOutcome: Record<string, number> = {};
    for (const id of runIds()) {
      const st = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', id, 'status.json'), 'utf8'));
      const key = `${accepted.has(id) ? 'acked' : 'unacked'}:${st.state}${st.error ? `/${st.error.code}` : ''}`;
      byOutcome[key] = (byOutcome[key] ?? 0) + 1;
    }
    process.stderr.write(`soak: ${accepted.size} accepted (target ${TARGET}) of ${c.attempts} attempts in ${launchSecs.toFixed(1)} s; refused ${JSON.stringify(refused)}; `
      + `unacknowledged (server killed mid-call) ${c.unacknowledged}; cancels ${c.cancels}, runner SIGKILLs ${c.runnerKills}, server SIGKILLs ${c.serverKills}; `
      + `max capacity.active ${c.maxActive}/${LIMIT}; run dirs ${runIds().length}; outcomes ${JSON.stringify(byOutcome)}\n`);

    // Every accepted launch is accounted for: its record exists and it is terminal (or provably alive).
    expect(accepted.size).toBeGreaterThanOrEqual(MIN_ACCEPTED);
    expect(c.serverKills).toBeGreaterThan(0);
    const notTerminal: string[] = [];
    for (const id of runIds()) {
      const st = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', id, 'status.json'), 'utf8'));
      if (!TERMINAL.has(st.state)) {
        const alive = st.runner && fs.existsSync(`/proc/${st.runner.pid}`) && pidAlive(st.runner.pid);
        if (!alive) notTerminal.push(`${id}:${st.state}`);
      }
    }
    for (const id of accepted.keys()) expect(fs.existsSync(path.join(t.home, 'runs', id, 'run.json')), id).toBe(true);
    expect(notTerminal).toEqual([]);

    // Capacity: never above the limit; at the end no root or agent slot is held (no run is live).
    expect(c.maxActive).toBeLessThanOrEqual(LIMIT);
    const final = await checker.call('launch', { agent: 'quick', task: 'last' }); // a launch prunes what is provably dead
    expect(final.isError, textOf(final)).toBeFalsy();
    const finalId = sc(final).runId as string;
    await checker.call('status', { runId: finalId, waitMs: 10_000, until: 'terminal' });
    const ledgerFile = path.join(t.home, 'ledger.json');
    const held = () => {
      const l = JSON.parse(fs.readFileSync(ledgerFile, 'utf8'));
      return [...Object.entries(l.roots), ...Object.entries(l.agents)].map(([k, v]) => `${k}=${JSON.stringify(v)} (${stateOf(k.split(':')[0]!)})`);
    };
    await until(() => held().length === 0, 10_000);
    expect(held()).toEqual([]);
    expect(sc(await checker.call('status', {})).capacity.active).toBe(0);

    // No orphans: runners of abandoned handshakes exit within the handshake timeout; nothing carries a run token.
    expect(await until(() => pidsWithArg(path.join(t.home, 'runs')).length === 0, 10_000)).toBe(true);
    const leftovers = runIds().flatMap((id) => pidsWithToken(readRecord(t.home, id).runToken).map((p) => `${id}:${p}`));
    expect(leftovers).toEqual([]);

    // No temp files.
    expect(tempFiles(t.home)).toEqual([]);
  }, 180_000);
});
