// Capacity under contention: 4 servers on one state home, each with 8 launch loops in flight (32 callers), launch as
// fast as they can against SUBAGENTS_MAX_ACTIVE_RUNS = 16 for a fixed time (agents hold their slot ~2 s, so the cap fills). Prints admitted launches per second, the
// latency of an admitted launch and of a refusal, and the most active runs ever seen in the ledger and as live
// runner processes — which must equal the cap and never exceed it (printed, like every figure; speed never fails).
import fs from 'node:fs';
import path from 'node:path';
import { note, now, reapHome, report, runBench, serverEnv, sleep, startServer, tempHome, until, writeAgent } from './lib.mjs';

const SERVERS = 4;
const CAP = 16;
const SECONDS = Number(process.env.BENCH_CAPACITY_SECONDS) || 8;
const HOLD_S = process.env.BENCH_CAPACITY_HOLD_S ?? '2';
/** Concurrent launch loops per server: together more than the cap, so refusals happen and the cap fills. */
const IN_FLIGHT = 8;

function activeRoots(home) {
  try { return Object.keys(JSON.parse(fs.readFileSync(path.join(home, 'ledger.json'), 'utf8')).roots).length; } catch { return 0; }
}

/**
 * Runners alive now with their run not yet terminal, by the identity each reported (ready.json: pid + start time).
 * A runner records its terminal state before it returns its slot, then exits: those last milliseconds hold no slot.
 */
function liveRunners(home, dead) {
  let n = 0;
  let names = [];
  try { names = fs.readdirSync(path.join(home, 'runs')); } catch { return 0; }
  for (const id of names) {
    if (dead.has(id)) continue;
    try {
      const ready = JSON.parse(fs.readFileSync(path.join(home, 'runs', id, 'ready.json'), 'utf8'));
      const stat = fs.readFileSync(`/proc/${ready.pid}/stat`, 'utf8');
      const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (f[0] !== 'Z' && f[19] === ready.startTime) {
        const st = JSON.parse(fs.readFileSync(path.join(home, 'runs', id, 'status.json'), 'utf8')).state;
        if (st === 'starting' || st === 'running') n++;
      } else dead.add(id);
    } catch (e) {
      if (e.code === 'ENOENT' && fs.existsSync(path.join(home, 'runs', id, 'ready.json'))) dead.add(id);
    }
  }
  return n;
}

runBench(async () => {
  const h = tempHome();
  writeAgent(h.home, 'hold', { backend: 'command', command: ['sh', '-c', `sleep ${HOLD_S}`] });
  const env = serverEnv(h, { SUBAGENTS_MAX_ACTIVE_RUNS: String(CAP), SUBAGENTS_MAX_AGENTS: '64', SUBAGENTS_KILL_GRACE_MS: '500' });
  const servers = await Promise.all(Array.from({ length: SERVERS }, () => startServer(env)));
  const admittedMs = [];
  const refusedMs = [];
  const other = new Map();
  let maxRoots = 0;
  let maxRunners = 0;
  let samples = 0;
  const dead = new Set();
  let sampling = true;
  const observer = (async () => {
    while (sampling) {
      maxRoots = Math.max(maxRoots, activeRoots(h.home));
      maxRunners = Math.max(maxRunners, liveRunners(h.home, dead));
      samples++;
      await sleep(2);
    }
  })();
  try {
    const t0 = now();
    const end = t0 + SECONDS * 1000;
    await Promise.all(servers.flatMap((s) => Array.from({ length: IN_FLIGHT }, () => s)).map(async (s) => {
      while (now() < end) {
        const a = now();
        const r = await s.call('launch', { agent: 'hold', task: 'x', queue: false }, { allowError: true });
        const ms = now() - a;
        if (!r.isError) admittedMs.push(ms);
        else {
          const code = (r.content?.[0]?.text ?? '').split(':')[0];
          if (code === 'CAPACITY_EXHAUSTED') refusedMs.push(ms);
          else other.set(code, (other.get(code) ?? 0) + 1);
          await sleep(20); // a refused client backs off a little, as a model would wait with status
        }
      }
    }));
    const elapsedS = (now() - t0) / 1000;
    // Let every run end: the slots must all come back.
    await until(() => activeRoots(h.home) === 0, 60_000, 50);
    sampling = false;
    await observer;
    note(`${SERVERS} servers × ${IN_FLIGHT} launch loops, cap ${CAP}, agents hold their slot ${HOLD_S} s, ${elapsedS.toFixed(1)} s of launching`);
    note(`admitted launches/s: ${(admittedMs.length / elapsedS).toFixed(1)} (${admittedMs.length} admitted, ${refusedMs.length} CAPACITY_EXHAUSTED${other.size ? `, other: ${[...other].map(([k, v]) => `${k} ${v}`).join(', ')}` : ''})`);
    report('admitted launch (reserve → runner ready → proceed → answer)', admittedMs, null);
    if (refusedMs.length) report('CAPACITY_EXHAUSTED refusal', refusedMs, null);
    note(`max active runs seen in the ledger: ${maxRoots} (cap ${CAP}) ${maxRoots > CAP ? 'EXCEEDED THE CAP' : maxRoots === CAP ? '= cap' : '< cap (the cap was never filled)'}`);
    note(`max live runner processes seen: ${maxRunners} (cap ${CAP}) ${maxRunners > CAP ? 'EXCEEDED THE CAP' : 'within the cap'}; ${samples} samples`);
    note(`slots after every run ended: ${activeRoots(h.home)}`);
  } finally {
    sampling = false;
    await Promise.all(servers.map((s) => s.close()));
    await reapHome(h.home);
    h.cleanup();
  }
});
