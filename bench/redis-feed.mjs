// The Redis feed of run events (docs/watch-and-ui.md, "`watch` over Redis"), measured in one run:
//  - an event recorded (the same script a run's end uses: RPUSH + XADD) → its line printed by a `watch --redis --json`
//    process that follows the stream with XREAD BLOCK, against a PING round trip of the same client (the floor);
//  - the event's own recording call, against the same floor.
// Starts its own redis-server (the Debian package) on a free loopback port with a temp data dir; never fails on speed.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { MAIN_JS, REPO, SAMPLES, cleanEnv, now, note, report, stats, until } from './lib.mjs';

const REDIS = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => fs.existsSync(p));
if (!REDIS) { note('redis-feed: skipped (no redis-server installed)'); process.exit(0); }
const dist = (p) => import(pathToFileURL(path.join(REPO, 'dist', p)).href);
const { connect } = await dist('store/redis/connection.js');
const { RedisRuns } = await dist('store/redis/run-store.js');

const port = await new Promise((resolve) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); }); });
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-bench-feed-'));
const redis = spawn(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dataDir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', '', '--daemonize', 'no'], { stdio: 'ignore' });
const url = `redis://127.0.0.1:${port}`;
await until(() => new Promise((r) => { const c = net.connect(port, '127.0.0.1'); c.once('connect', () => { c.destroy(); r(true); }); c.once('error', () => r(false)); }), 10_000, 50);

const runs = new RedisRuns(connect(url, { name: 'bench' }));
const watch = spawn(process.execPath, [MAIN_JS, 'watch', '--json'], { env: cleanEnv({ SUBAGENTS_REDIS_URL: url, SUBAGENTS_HOME: path.join(dataDir, 'home') }), stdio: ['ignore', 'pipe', 'ignore'] });
let out = '';
const waiting = new Map();
watch.stdout.on('data', (c) => {
  out += c;
  let nl;
  while ((nl = out.indexOf('\n')) >= 0) {
    const line = out.slice(0, nl);
    out = out.slice(nl + 1);
    try { const e = JSON.parse(line); waiting.get(e.i)?.(); } catch { /* not ours */ }
  }
});
const seen = (i) => new Promise((r) => waiting.set(i, r));

try {
  // Until watch has read the stream's end once: warm-up events until one is printed.
  let k = -1;
  await until(async () => { const p = seen(k); await runs.event('r-benchbenchbenchbenchbenc', { type: 'bench', i: k }); return Promise.race([p.then(() => true), new Promise((r) => setTimeout(() => r(false), 500))]).then((ok) => { k--; return ok; }); }, 30_000, 10);
  const ping = [], record = [], delivered = [];
  for (let i = 0; i < SAMPLES; i++) {
    let t0 = now();
    await runs.redis.ping();
    ping.push(now() - t0);
    const shown = seen(i);
    t0 = now();
    await runs.event('r-benchbenchbenchbenchbenc', { type: 'bench', i });
    record.push(now() - t0);
    await shown;
    delivered.push(now() - t0);
  }
  const floor = stats(ping);
  report('redis-feed: PING round trip', floor, null);
  report('redis-feed: an event recorded (RPUSH + XADD, one script)', record, floor, { note: 'floor = PING, same client' });
  report('redis-feed: an event recorded → its line printed by watch --redis', delivered, floor, { note: 'floor = PING, same client' });
} finally {
  watch.kill('SIGTERM');
  runs.redis.disconnect();
  redis.kill('SIGTERM');
  await new Promise((r) => redis.once('exit', r));
  fs.rmSync(dataDir, { recursive: true, force: true });
}
