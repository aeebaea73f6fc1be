// The session's own history: a server whose session holds 1 000 finished runs (adopted with restore) against one
// whose session holds one. Idle: their main threads' CPU per second (/proc/<pid>/schedstat) over the same 1 s windows;
// a server sits idle most of its life, one per open client window. Status list: the round trip of `status {}`, in
// turn. Launch: the round trip of a launch of an instant agent, each run waited to its end, in turn.
// (bench/history.mjs has the runs in other sessions.)
import fs from 'node:fs';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import { SAMPLES, cpuMs, now, reapHome, report, runBench, serverEnv, sleep, startServer, tempHome, writeAgent } from './lib.mjs';

const RUNS = Number(process.env.BENCH_SESSION_RUNS) || 1000;

/** A home whose one session owns `extra` finished runs besides a real one (copies of it, indexed under the session). */
async function homeWithSession(extra) {
  const h = tempHome();
  writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  const s = await startServer(serverEnv(h));
  const runId = (await s.call('launch', { agent: 'instant', task: 'x' })).structuredContent.runId;
  const { sessionId } = (await s.call('status', { runId, waitMs: 30_000, until: 'terminal' })).structuredContent;
  await s.close();
  const read = (name) => JSON.parse(fs.readFileSync(path.join(h.home, 'runs', runId, name), 'utf8'));
  const record = read('run.json');
  const status = read('status.json');
  let lines = '';
  for (let i = 0; i < extra; i++) {
    const id = `r-${randomBytes(18).toString('base64url')}`;
    const dir = path.join(h.home, 'runs', id);
    fs.mkdirSync(dir, { mode: 0o700 });
    fs.writeFileSync(path.join(dir, 'run.json'), JSON.stringify({ ...record, runId: id, rootRunId: id }), { mode: 0o600 });
    fs.writeFileSync(path.join(dir, 'status.json'), JSON.stringify({ ...status, runId: id }), { mode: 0o600 });
    lines += `${id}\n`;
  }
  fs.appendFileSync(path.join(h.home, 'index', `${encodeURIComponent(sessionId)}.runs`), lines);
  const served = await startServer(serverEnv(h));
  const adopted = (await served.call('restore', { lineage: [sessionId] })).structuredContent;
  return { h, s: served, adopted };
}

runBench(async () => {
  const homes = [await homeWithSession(0), await homeWithSession(RUNS - 1)];
  try {
    await sleep(1000); // past restore's own work and the first full scans
    // Both idle servers measured over the same 1 s windows. The poll's audit of every run comes every 5 s, so most
    // windows hold none: the median is a window without one, and the mean (printed, and the ratio's base) is the cost.
    const perSecond = [[], []];
    for (let i = 0; i < SAMPLES; i++) {
      const c0 = homes.map(({ s }) => cpuMs(s.pid));
      const t0 = performance.now();
      await sleep(1000);
      const dt = performance.now() - t0;
      homes.forEach(({ s }, k) => perSecond[k].push(((cpuMs(s.pid) - c0[k]) * 1000) / dt));
    }
    const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const median = (xs) => [...xs].sort((a, b) => a - b)[xs.length >> 1];
    report(`idle server CPU per second, ${RUNS} runs in its session / 1`, perSecond[1], median(perSecond[0]), {
      ratio: mean(perSecond[1]) / mean(perSecond[0]),
      note: `main thread, /proc/<pid>/schedstat, 1 s windows of both at once; mean ${mean(perSecond[1]).toFixed(1)} vs ${mean(perSecond[0]).toFixed(1)} ms/s, the ratio is of the means; floor = the same server with one run`,
    });
    const lists = [[], []];
    for (let i = 0; i < SAMPLES + 2; i++) {
      for (const k of i % 2 ? [0, 1] : [1, 0]) {
        const t0 = now();
        await homes[k].s.call('status', {});
        if (i >= 2) lists[k].push(now() - t0);
      }
    }
    report(`status list, ${RUNS} runs in its session / 1`, lists[1], median(lists[0]), { note: `floor = the same list in a session with one run; interleaved; the list shows the newest 200 runs and counts the rest` });
    const launches = [[], []];
    for (let i = 0; i < SAMPLES + 3; i++) {
      for (const k of i % 2 ? [0, 1] : [1, 0]) {
        const { s } = homes[k];
        const t0 = now();
        const runId = (await s.call('launch', { agent: 'instant', task: 'x' })).structuredContent.runId;
        const ms = now() - t0;
        await s.call('status', { runId, waitMs: 30_000, until: 'terminal' });
        if (i >= 3) launches[k].push(ms);
      }
    }
    report(`launch, ${RUNS} runs in its session / 1`, launches[1], median(launches[0]), { note: 'floor = the same launch in a session with one run; interleaved; the history target (≤ 1.2) for the session\'s own runs' });
  } finally {
    for (const { h, s } of homes) { await s.close(); await reapHome(h.home); h.cleanup(); }
  }
});
