// The first sweep of a new server over a large home: SPEC §6's sweep reconciles every run of the state home every 30 s,
// and a new server's first one reads each run's status once (later ones skip the runs seen ended). With 10 000
// finished runs of other sessions, a tool call made at that moment waits for it unless the sweep yields. Pings every
// 10 ms from the server's start to past its first sweep; the figure is the slowest ping around the sweep (one
// sample, the sweep happens once), against the median ping of the whole time.
import { generateFinishedRuns, now, reapHome, report, runBench, serverEnv, sleep, startServer, stats, tempHome, templateRun, writeAgent } from './lib.mjs';

const RUNS = Number(process.env.BENCH_SWEEP_RUNS) || 10_000;
/** SWEEP_INTERVAL_MS (src/manager/sweep.ts) and a margin for the sweep itself. */
const FIRST_SWEEP_AT_MS = 30_000;
const WATCH_UNTIL_MS = FIRST_SWEEP_AT_MS + 6_000;

runBench(async () => {
  const h = tempHome();
  writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  const t0 = now();
  generateFinishedRuns(h.home, await templateRun(h), RUNS);
  const genMs = now() - t0;
  const s = await startServer(serverEnv(h));
  try {
    const started = now();
    await s.call('status', {}); // the first list (and the index) done before the pings start
    const all = [];
    const around = [];
    while (now() - started < WATCH_UNTIL_MS) {
      const at = now() - started;
      await s.client.ping();
      const ms = now() - started - at;
      all.push(ms);
      if (at >= FIRST_SWEEP_AT_MS - 1_000) around.push(ms);
      await sleep(10);
    }
    const worst = Math.max(...around);
    report(`ping during a new server's first sweep, ${RUNS} runs of other sessions: slowest`, { n: 1, median: worst, p90: worst }, stats(all), {
      note: `1 sample (the sweep comes once, ${FIRST_SWEEP_AT_MS / 1000} s after the start); floor = the median ping over the ${(WATCH_UNTIL_MS / 1000).toFixed(0)} s; ${all.length} pings; generating the runs took ${(genMs / 1000).toFixed(1)} s`,
    });
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
});
