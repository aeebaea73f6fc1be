// `launch` round trip (tools/call → answer; the runner spawned, ready, bound, told to proceed and started) for a trivial
// command agent, against `node -e 0` spawn → exit measured in the same run, interleaved sample by sample so that load
// drifts hit both alike. Also the bare detached-handshake floor (a builtins-only runner, ready/proceed over files) for
// context. Each run is waited to its end between samples (not timed), so runs never pile up. Prints figures; never
// fails on speed.
import { spawn } from 'node:child_process';
import {
  SAMPLES, cleanEnv, handshakeFloor, note, now, reapHome, report, runBench, serverEnv, startServer, stats, tempHome, writeAgent,
} from './lib.mjs';

/** One `node -e 0` spawn → exit, with the same clean environment the server runs with. */
function nodeOnce() {
  const t0 = now();
  return new Promise((resolve, reject) => {
    const c = spawn(process.execPath, ['-e', '0'], { stdio: 'ignore', env: cleanEnv() });
    c.on('error', reject);
    c.on('close', () => resolve(now() - t0));
  });
}

runBench(async () => {
  const h = tempHome();
  writeAgent(h.home, 'trivial', { backend: 'command', command: ['true'] });
  // serverEnv: no capacity limit (SUBAGENTS_MAX_ACTIVE_RUNS=0) and a clean environment (no NODE_EXTRA_CA_CERTS).
  const s = await startServer(serverEnv(h, { SUBAGENTS_MAX_ACTIVE_RUNS: '1000' }));
  const launches = [];
  const nodes = [];
  const WARM = 3;
  try {
    for (let i = 0; i < SAMPLES + WARM; i++) {
      const t0 = now();
      const r = await s.call('launch', { agent: 'trivial', task: `sample ${i}` });
      const ms = now() - t0;
      const n = await nodeOnce();
      if (i >= WARM) { launches.push(ms); nodes.push(n); }
      // Not timed: let the run end so the next sample starts from the same idle state.
      const runId = r.structuredContent.runId;
      for (let k = 0; k < 10; k++) {
        const st = await s.call('status', { runId, waitMs: 10_000, until: 'terminal' });
        if (['completed', 'failed', 'cancelled'].includes(st.structuredContent.state)) {
          if (st.structuredContent.state !== 'completed') throw new Error(`run ${runId} ended ${st.structuredContent.state}`);
          break;
        }
      }
    }
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
  const node = stats(nodes);
  report('launch round trip, trivial command agent', launches, node, { note: `floor = \`node -e 0\` spawn → exit, same run, interleaved; n=${launches.length}` });
  report('node -e 0 spawn → exit', node, null);
  const floor = await handshakeFloor(Math.max(10, Math.round(SAMPLES / 2)));
  report('bare detached handshake (spawn → ready → proceed → started)', floor.started, node, { note: 'what any detached-runner design pays' });
  note(`launch / bare handshake: ${(stats(launches).median / floor.started.median).toFixed(2)}`);
});
