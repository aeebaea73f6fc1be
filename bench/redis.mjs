// Distributed mode against local mode, measured in the same run (docs/performance.md, "Distributed mode"):
//  - launch round trip: launch → status { waitMs, until: "terminal" } answered completed, for an agent that echoes
//    its task, through a local server and through a server in distributed mode with one worker (concurrency 2);
//  - throughput: 16 runs of a 1 s agent with 1, 2 and 4 workers of concurrency 2, as runs per second against the
//    linear ideal (each worker adds 2 runs at a time).
// Starts its own redis-server (the Debian package) on a free loopback port with a temp data dir; never fails on speed.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { FAKE_AGENT, MAIN_JS, SAMPLES, cleanEnv, now, report, note, scaled, serverEnv, startServer, stats, tempHome, until, writeAgent } from './lib.mjs';

const REDIS = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => fs.existsSync(p));
if (!REDIS) { note('redis: skipped (no redis-server installed)'); process.exit(0); }

const port = await new Promise((resolve) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); }); });
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-bench-redis-'));
const redis = spawn(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dataDir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', '', '--daemonize', 'no'], { stdio: 'ignore' });
const url = `redis://127.0.0.1:${port}`;
await until(() => new Promise((r) => { const c = net.connect(port, '127.0.0.1'); c.once('connect', () => { c.destroy(); r(true); }); c.once('error', () => r(false)); }), 10_000, 50);

const h = tempHome('sa-bench-redis-');
const workers = [];
let started = 0;
function startWorker(n) {
  const home = path.join(h.base, `worker-${n}-${started++}`);
  fs.mkdirSync(home, { mode: 0o700 });
  writeAgent(home, 'echo', { backend: 'command', command: ['node', FAKE_AGENT, 'echo'] });
  writeAgent(home, 'second', { backend: 'command', command: ['node', FAKE_AGENT, 'sleep', '1000'] });
  let log = '';
  const child = spawn(process.execPath, [MAIN_JS, 'worker', '--home', home, '--root', h.root, '--concurrency', '2'], { env: cleanEnv({ SUBAGENTS_REDIS_URL: url }), stdio: ['ignore', 'ignore', 'pipe'] });
  child.stderr.on('data', (c) => { log += c; });
  workers.push(child);
  return until(() => /worker w-/.test(log), 20_000, 20).then(() => child);
}
async function stopWorkers() {
  for (const w of workers.splice(0)) { w.kill('SIGTERM'); await new Promise((r) => w.once('exit', r)); }
}
async function roundTrip(s) {
  const t0 = now();
  const r = await s.call('launch', { agent: 'echo', task: 'hi' });
  const runId = r.structuredContent.runId;
  for (;;) {
    const st = await s.call('status', { runId, waitMs: 30_000, until: 'terminal' });
    if (['completed', 'failed', 'cancelled'].includes(st.structuredContent.state)) break;
  }
  return now() - t0;
}

try {
  writeAgent(h.home, 'echo', { backend: 'command', command: ['node', FAKE_AGENT, 'echo'] });
  const local = await startServer(serverEnv(h));
  const dist = await startServer(serverEnv(h, { SUBAGENTS_HOME: path.join(h.base, 'server-home'), SUBAGENTS_REDIS_URL: url }));
  await startWorker(1);
  const n = scaled(20);
  for (let i = 0; i < 3; i++) { await roundTrip(local); await roundTrip(dist); } // warm-up
  const l = [], d = [];
  for (let i = 0; i < n; i++) { l.push(await roundTrip(local)); d.push(await roundTrip(dist)); }
  const ls = stats(l);
  report('redis: launch round trip, local mode', ls, null);
  report('redis: launch round trip, distributed mode (1 worker)', d, ls, { note: 'floor = local mode, same run' });
  await stopWorkers();

  const RUNS = 16;
  let single = null;
  for (const count of [1, 2, 4]) {
    for (let i = 0; i < count; i++) await startWorker(count);
    const t0 = now();
    const ids = [];
    for (let i = 0; i < RUNS; i++) ids.push((await dist.call('launch', { agent: 'second', task: String(i) })).structuredContent.runId);
    for (const runId of ids) {
      for (;;) {
        const st = await dist.call('status', { runId, waitMs: 30_000, until: 'terminal' });
        if (['completed', 'failed', 'cancelled'].includes(st.structuredContent.state)) break;
      }
    }
    const secs = (now() - t0) / 1000;
    const perSec = RUNS / secs;
    single ??= perSec;
    note(`redis: throughput of 1 s agents, ${count} worker(s) × concurrency 2: ${perSec.toFixed(2)} runs/s (${RUNS} runs in ${secs.toFixed(1)} s), ${(perSec / (single * count)).toFixed(2)} × linear`);
    await stopWorkers();
  }
  await local.close();
  await dist.close();
} finally {
  await stopWorkers();
  redis.kill('SIGTERM');
  await new Promise((r) => redis.once('exit', r));
  fs.rmSync(dataDir, { recursive: true, force: true });
  h.cleanup();
  void SAMPLES;
}
