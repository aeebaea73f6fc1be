// Interleaved A/B of two or more builds: one server per build, sampled in turn, so that the machine's drift (here
// ±20–35% over minutes) hits every build alike. Full benchmark runs of one build apart differ by more than most
// single changes; every "interleaved A/B" figure in docs/performance.md comes from this.
//
//   node bench/tools/ab.mjs <a/dist/main.js> <b/dist/main.js> [...]      (AB_ONLY=launch|burst|sleepers, AB_ROUNDS=n)
//
// launch: sequential launches of an instant agent, each run waited to its end before the next (60 by default).
// burst: rounds of 8 concurrent launches (14 by default), with 8 bare detached handshakes as the floor of each round,
// and the server's main-thread CPU per round (launches, their statuses until terminal).
// sleepers: rounds of 8 concurrent 1 s agents, each `launch` + `status` until terminal, as bench/peer.mjs's burst
// (12 by default, 1 s apart; each server's first round, in which its warm pool grows, left out). Prints figures;
// never fails.
import fs from 'node:fs';
import path from 'node:path';
import {
  cpuMs, handshakeFloorConcurrent, now, reapHome, runBench, serverEnv, startServer, stats, tempHome, writeAgent,
} from '../lib.mjs';

const builds = process.argv.slice(2).map((p) => path.resolve(p));
if (builds.length < 2) {
  process.stderr.write('usage: node bench/tools/ab.mjs <dist/main.js> <dist/main.js> [...]\n');
  process.exit(2);
}
const only = process.env.AB_ONLY ?? 'launch,burst';
const SLEEPER = '#!/bin/sh\nsleep 1\necho done\n';

async function startAll() {
  const out = [];
  for (const [i, main] of builds.entries()) {
    const h = tempHome();
    writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
    const sleeper = path.join(h.base, 'sleeper');
    fs.writeFileSync(sleeper, SLEEPER, { mode: 0o755 });
    writeAgent(h.home, 'sleeper', { backend: 'command', command: [sleeper] });
    out.push({ name: `${String.fromCharCode(65 + i)} ${main}`, h, s: await startServer(serverEnv(h), { args: [main, 'serve'] }) });
  }
  return out;
}

async function stopAll(servers) {
  for (const v of servers) {
    await v.s.close();
    await reapHome(v.h.home);
    v.h.cleanup();
  }
}

async function untilTerminal(s, runId) {
  await s.call('status', { runId, waitMs: 30_000, until: 'terminal' });
}

async function launches(rounds) {
  const servers = await startAll();
  try {
    const ms = servers.map(() => []);
    for (let i = 0; i < rounds + 3; i++) {
      const order = i % 2 ? [...servers.keys()].reverse() : [...servers.keys()];
      for (const k of order) {
        const t0 = now();
        const l = await servers[k].s.call('launch', { agent: 'instant', task: 'x' });
        const took = now() - t0;
        await untilTerminal(servers[k].s, l.structuredContent.runId);
        if (i >= 3) ms[k].push(took);
      }
    }
    servers.forEach((v, k) => {
      const st = stats(ms[k]);
      console.log(`launch, ${v.name}: median ${st.median.toFixed(1)} ms, p90 ${st.p90.toFixed(1)} ms (n=${ms[k].length})`);
    });
  } finally {
    await stopAll(servers);
  }
}

async function bursts(rounds, k = 8) {
  const servers = await startAll();
  try {
    const walls = servers.map(() => []);
    const cpu = servers.map(() => []);
    const floors = [];
    for (let i = 0; i < rounds + 1; i++) {
      const floor = (await handshakeFloorConcurrent(k, 1)).median;
      const order = i % 2 ? [...servers.keys()].reverse() : [...servers.keys()];
      for (const j of order) {
        const { s, h } = servers[j];
        const c0 = cpuMs(s.pid);
        const t0 = now();
        const ls = await Promise.all(Array.from({ length: k }, () => s.call('launch', { agent: 'instant', task: 'x' })));
        const wall = now() - t0;
        for (const l of ls) await untilTerminal(s, l.structuredContent.runId);
        await reapHome(h.home, 2000);
        if (i > 0) { walls[j].push(wall); cpu[j].push(cpuMs(s.pid) - c0); }
      }
      if (i > 0) floors.push(floor);
    }
    const f = stats(floors).median;
    servers.forEach((v, j) => {
      const w = stats(walls[j]).median;
      console.log(`${k} concurrent launches, ${v.name}: wall median ${w.toFixed(0)} ms, ratio ${(w / f).toFixed(2)} to ${k} bare handshakes (${f.toFixed(0)} ms); server main-thread CPU per round ${stats(cpu[j]).median.toFixed(0)} ms (n=${walls[j].length})`);
    });
  } finally {
    await stopAll(servers);
  }
}

async function sleepers(rounds, k = 8) {
  const servers = await startAll();
  try {
    const walls = servers.map(() => []);
    const run = async (s) => {
      const l = await s.call('launch', { agent: 'sleeper', task: 'x' });
      await untilTerminal(s, l.structuredContent.runId);
    };
    for (let i = 0; i < rounds + 1; i++) {
      const order = i % 2 ? [...servers.keys()].reverse() : [...servers.keys()];
      for (const j of order) {
        const t0 = now();
        await Promise.all(Array.from({ length: k }, () => run(servers[j].s)));
        if (i > 0) walls[j].push(now() - t0);
        await new Promise((r) => setTimeout(r, 1000)); // the pool's refill, as between two bursts of a session
      }
    }
    servers.forEach((v, j) => {
      const st = stats(walls[j]);
      console.log(`${k} concurrent 1 s agents, ${v.name}: wall median ${st.median.toFixed(0)} ms, p90 ${st.p90.toFixed(0)} ms (n=${walls[j].length})`);
    });
  } finally {
    await stopAll(servers);
  }
}

runBench(async () => {
  if (only.includes('launch')) await launches(Number(process.env.AB_ROUNDS) || 60);
  if (only.includes('burst')) await bursts(Number(process.env.AB_ROUNDS) || 14);
  if (only.includes('sleepers')) await sleepers(Number(process.env.AB_ROUNDS) || 12);
});
