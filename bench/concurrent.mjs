// 8 concurrent launches against 8 concurrent bare detached-runner handshakes, sampled in turn (one floor round, one
// launch round): the e2e bench's 8-way figure measures its floor before its launches, and on a shared 2-core machine
// the floor alone drifts 150–210 ms between runs. Also the whole machine's CPU per round (/proc/stat): both sides are
// CPU-bound on 2 cores, so the CPU ratio says how much of the wall ratio is work rather than waiting.
import fs from 'node:fs';
import {
  handshakeFloorConcurrent, note, now, reapHome, report, runBench, scaled, serverEnv, startServer, tempHome, writeAgent,
} from './lib.mjs';

/** CPU time of the whole machine so far, in ms (user + nice + system + irq + softirq). */
function machineCpuMs() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  return (f[0] + f[1] + f[2] + f[5] + f[6]) * (1000 / 100); // USER_HZ is 100 on Linux
}

runBench(async () => {
  const k = 8;
  const h = tempHome();
  writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  const s = await startServer(serverEnv(h));
  try {
    const walls = [], floors = [], leans = [], cpuOurs = [], cpuFloor = [];
    const rounds = scaled(20);
    for (let i = 0; i < rounds + 1; i++) {
      let c0 = machineCpuMs();
      const floor = (await handshakeFloorConcurrent(k, 1)).median;
      const floorCpu = machineCpuMs() - c0;
      const lean = (await handshakeFloorConcurrent(k, 1, { lean: true })).median;
      c0 = machineCpuMs();
      const t0 = now();
      const ls = await Promise.all(Array.from({ length: k }, () => s.call('launch', { agent: 'instant', task: 'x' })));
      const wall = now() - t0;
      for (const l of ls) await s.call('status', { runId: l.structuredContent.runId, waitMs: 30_000, until: 'terminal' });
      await reapHome(h.home, 2000);
      if (i === 0) continue; // warm-up: the server's first launches load its code and start its spawner thread
      walls.push(wall);
      floors.push(floor);
      leans.push(lean);
      cpuOurs.push(machineCpuMs() - c0);
      cpuFloor.push(floorCpu);
    }
    const sorted = [...floors].sort((a, b) => a - b);
    report(`${k} concurrent launches, wall (interleaved)`, walls, sorted[Math.floor(sorted.length / 2)], { note: `floor = ${k} concurrent bare handshakes, sampled in turn; target ratio ≤ 1.5` });
    const ls = [...leans].sort((a, b) => a - b);
    report(`${k} concurrent launches / ${k} lean bare handshakes`, walls, ls[Math.floor(ls.length / 2)], { note: 'the floor runner as CommonJS, no child_process before ready (as ours): stricter than the target\'s floor' });
    const cf = [...cpuFloor].sort((a, b) => a - b);
    report(`${k} concurrent launches, machine CPU per round`, cpuOurs, cf[Math.floor(cf.length / 2)], { note: 'launch, status until terminal, reap; floor = the bare handshakes\' round' });
    note(`${rounds} rounds`);
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
});
