// Cancel: from the cancel call to the whole agent tree gone (no process of the run's agents left, polled in /proc),
// for a tree that obeys SIGTERM and one that ignores it (SIGKILL after the grace). Floor: the configured grace;
// target: ≤ grace + 100 ms.
import fs from 'node:fs';
import path from 'node:path';
import { now, processesOfHome, reapHome, report, runBench, scaled, serverEnv, sleep, startServer, tempHome, writeAgent } from './lib.mjs';

const GRACE = Number(process.env.BENCH_KILL_GRACE_MS) || 500;

runBench(async () => {
  const h = tempHome();
  // a shell with two children; `trap '' TERM` is inherited across exec, so the whole tree ignores SIGTERM
  writeAgent(h.home, 'tree', { backend: 'command', command: ['sh', '-c', 'sleep 60 & sleep 60 & wait'] });
  writeAgent(h.home, 'stubborn', { backend: 'command', command: ['sh', '-c', "trap '' TERM; sleep 60 & sleep 60 & wait"] });
  const s = await startServer(serverEnv(h, { SUBAGENTS_KILL_GRACE_MS: String(GRACE) }));
  const agentsOf = () => processesOfHome(h.home).filter((pid) => !isRunner(pid));
  try {
    for (const agent of ['tree', 'stubborn']) {
      const gone = [];
      const answered = [];
      for (let i = 0; i < scaled(30) + 1; i++) {
        const runId = (await s.call('launch', { agent, task: 'x' })).structuredContent.runId;
        // wait until the shell and both sleeps are up
        const end = now() + 10_000;
        while (agentsOf().length < 3 && now() < end) await sleep(10);
        const t0 = now();
        const call = s.call('cancel', { runId }).then(() => now() - t0);
        while (agentsOf().length > 0 && now() - t0 < GRACE + 10_000) await sleep(2);
        const g = now() - t0;
        const a = await call;
        if (i > 0) { gone.push(g); answered.push(a); }
        await reapHome(h.home, 5000);
      }
      const label = agent === 'tree' ? 'obeys SIGTERM' : 'ignores SIGTERM';
      report(`cancel → agent tree gone (${label})`, gone, GRACE, { note: `floor = the configured grace; target ≤ grace + 100 = ${GRACE + 100} ms` });
      report(`cancel call answered (${label})`, answered, GRACE);
    }
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
});

/** The run's runner, by its entry in the command line: dist/runner/main.cjs, or tsc's main.js in an unbundled build. */
function isRunner(pid) {
  try {
    const cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1');
    return cmd.includes(`${path.sep}runner${path.sep}main.cjs\0`) || cmd.includes(`${path.sep}runner${path.sep}main.js\0`);
  } catch {
    return false;
  }
}
