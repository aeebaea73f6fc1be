// History: `status` (list) and `launch` latency with 100, 1 000 and 10 000 finished runs of OTHER sessions in the
// state home, written straight to disk in the store's format (run.json and status.json: what listings read). The ratio of
// each figure is to the same figure with 100 runs (target: 10 000 / 100 ≤ 1.2). Also the first list after a cold
// start (spawn → initialize → first status list).
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { SAMPLES, now, reapHome, report, runBench, serverEnv, startServer, stats, tempHome, writeAgent } from './lib.mjs';

const SIZES = (process.env.BENCH_HISTORY_SIZES ?? '100,1000,10000').split(',').map(Number);
const id = (p) => `${p}-${randomBytes(18).toString('base64url')}`;

/** Writes `count` finished runs owned by other sessions (a new session every 10 runs), modelled on a real run. */
function generate(home, template, count) {
  const runsDir = path.join(home, 'runs');
  const sessionsDir = path.join(home, 'sessions');
  fs.mkdirSync(runsDir, { recursive: true, mode: 0o700 });
  fs.mkdirSync(sessionsDir, { recursive: true, mode: 0o700 });
  let session = null;
  const base = Date.now() - 30 * 24 * 3600 * 1000;
  for (let i = 0; i < count; i++) {
    if (i % 10 === 0) {
      session = id('s');
      fs.writeFileSync(path.join(sessionsDir, `${session}.json`), JSON.stringify({ v: 1, sessionId: session, startedAt: new Date(base).toISOString(), client: { name: 'bench', version: '1' }, ancestors: [] }), { mode: 0o600 });
    }
    const runId = id('r');
    const dir = path.join(runsDir, runId);
    const at = new Date(base + i * 1000).toISOString();
    const end = new Date(base + i * 1000 + 800).toISOString();
    fs.mkdirSync(dir, { mode: 0o700 });
    const record = { ...template.record, runId, sessionId: session, rootRunId: runId, createdAt: at, runToken: randomBytes(24).toString('base64url') };
    const steps = template.status.steps.map((s) => ({ ...s, startedAt: at, endedAt: end }));
    const status = { ...template.status, runId, state: 'completed', error: null, startedAt: at, endedAt: end, updatedAt: end, steps };
    fs.writeFileSync(path.join(dir, 'run.json'), JSON.stringify(record), { mode: 0o600 });
    fs.writeFileSync(path.join(dir, 'status.json'), JSON.stringify(status), { mode: 0o600 });
  }
}

runBench(async () => {
  // One home per size, each with its own server, sampled in interleaved rounds so that load drifts hit all alike.
  const homes = SIZES.map(() => tempHome());
  for (const h of homes) writeAgent(h.home, 'instant', { backend: 'command', command: ['true'] });
  const servers = [];
  try {
    // One real run, as the template of the generated ones; then its home is emptied of it.
    let template;
    {
      const h = homes[0];
      const s = await startServer(serverEnv(h));
      const runId = (await s.call('launch', { agent: 'instant', task: 'x' })).structuredContent.runId;
      await s.call('status', { runId, waitMs: 30_000, until: 'terminal' });
      await s.close();
      const dir = path.join(h.home, 'runs', runId);
      template = { record: JSON.parse(fs.readFileSync(path.join(dir, 'run.json'), 'utf8')), status: JSON.parse(fs.readFileSync(path.join(dir, 'status.json'), 'utf8')) };
      fs.rmSync(dir, { recursive: true, force: true });
      await reapHome(h.home);
    }
    const gen = SIZES.map((n, i) => { const t0 = now(); generate(homes[i].home, template, n); return now() - t0; });
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
