// History: `status` (list) and `launch` latency with 100, 1 000 and 10 000 finished runs of OTHER sessions in the
// state home, written straight to disk in the store's format (run.json and status.json: what listings read). The ratio of
// each figure is to the same figure with 100 runs (target: 10 000 / 100 ≤ 1.2). Also the first list after a cold
// start (spawn → initialize → first status list).
import { SAMPLES, generateFinishedRuns, now, reapHome, report, runBench, serverEnv, startServer, stats, tempHome, templateRun, writeAgent } from './lib.mjs';

const SIZES = (process.env.BENCH_HISTORY_SIZES ?? '100,1000,10000').split(',').map(Number);

runBench(async () => {
  // One home per size, each with its own server, sampled in interleaved rounds so that load drifts hit all alike.
  const homes = SIZES.map(() => tempHome());
  for (const h of homes) writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  const servers = [];
  try {
    const template = await templateRun(homes[0]);
    const gen = SIZES.map((n, i) => { const t0 = now(); generateFinishedRuns(homes[i].home, template, n); return now() - t0; });
    const cold = SIZES.map(() => []);
    const list = SIZES.map(() => []);
    const launch = SIZES.map(() => []);
    for (let i = 0; i < SIZES.length; i++) {
      const t0 = now();
      const s = await startServer(serverEnv(homes[i]));
      await s.call('status', {});
      cold[i].push(now() - t0);
      servers.push(s);
    }
    for (let r = 0; r < SAMPLES + 2; r++) {
      for (let i = 0; i < SIZES.length; i++) {
        const t = now();
        await servers[i].call('status', {});
        if (r >= 2) list[i].push(now() - t);
      }
    }
    for (let r = 0; r < SAMPLES + 2; r++) {
      for (let i = 0; i < SIZES.length; i++) {
        const t = now();
        const l = await servers[i].call('launch', { agent: 'instant', task: 'x' });
        if (r >= 2) launch[i].push(now() - t);
        await servers[i].call('status', { runId: l.structuredContent.runId, waitMs: 30_000, until: 'terminal' });
      }
    }
    // A second server on each home: the run index already exists (the first server of a home built it).
    const warmCold = SIZES.map(() => []);
    for (let i = 0; i < SIZES.length; i++) {
      const t0 = now();
      const s2 = await startServer(serverEnv(homes[i]));
      await s2.call('status', {});
      warmCold[i].push(now() - t0);
      await s2.close();
    }
    const note = (i) => `floor = the same with ${SIZES[0]} runs; generating ${SIZES[i]} runs took ${(gen[i] / 1000).toFixed(1)} s`;
    for (let i = 0; i < SIZES.length; i++) {
      report(`history ${SIZES[i]} runs: status list`, list[i], stats(list[0]), { note: note(i) });
      report(`history ${SIZES[i]} runs: launch`, launch[i], stats(launch[0]), { note: note(i) });
      report(`history ${SIZES[i]} runs: cold start → first status list, first server of the home (1 sample)`, cold[i], stats(cold[0]));
      report(`history ${SIZES[i]} runs: cold start → first status list, next server (1 sample)`, warmCold[i], stats(warmCold[0]));
    }
  } finally {
    for (const s of servers) await s.close();
    for (const h of homes) { await reapHome(h.home); h.cleanup(); }
  }
});
