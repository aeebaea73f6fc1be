// Distributed mode against local mode, measured in the same run (docs/performance.md, "Distributed mode"):
//  - launch round trip: launch → status { waitMs, until: "terminal" } answered completed, for an agent that echoes
//    its task, through a local server and through a server in distributed mode with one worker (concurrency 2);
//  - steady-state throughput of 1 s agents (/bin/sleep 1) with 1, 2 and 4 workers of concurrency 2. Each configuration gets WAVES
//    runs per slot, all launched at once (the queue stays full); the rate is taken from the runs' own end times
//    (`endedAt`) between the end of the first wave and the last end, so the ramp-up (launches, first runner boots,
//    the first BullMQ pick-ups) is not in it. Compared with the linear ideal (one worker's rate times the number of
//    workers), and as the share of the slots' time their agents run (agent steps' own start and end). It also prints the machine's CPU busy over the window
//    (/proc/stat) and CPU time per run (the processes under the server, Redis and the workers, live or reaped):
//    every worker, runner and agent here shares this machine's cores, so a
//    figure whose window is CPU-bound measures the machine, not the distribution.
// Starts its own redis-server (the Debian package) on a free loopback port with a temp data dir; never fails on speed.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { FAKE_AGENT, MAIN_JS, SAMPLES, cleanEnv, now, report, note, scaled, serverEnv, sleep, startServer, stats, tempHome, until, writeAgent } from './lib.mjs';

const REDIS = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => fs.existsSync(p));
if (!REDIS) { note('redis: skipped (no redis-server installed)'); process.exit(0); }

const port = await new Promise((resolve) => { const s = net.createServer(); s.listen(0, '127.0.0.1', () => { const p = s.address().port; s.close(() => resolve(p)); }); });
const dataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-bench-redis-'));
const redis = spawn(REDIS, ['--port', String(port), '--bind', '127.0.0.1', '--dir', dataDir, '--appendonly', 'yes', '--appendfsync', 'always', '--save', '', '--daemonize', 'no'], { stdio: 'ignore' });
const url = `redis://127.0.0.1:${port}`;
await until(() => new Promise((r) => { const c = net.connect(port, '127.0.0.1'); c.once('connect', () => { c.destroy(); r(true); }); c.once('error', () => r(false)); }), 10_000, 50);

/** Clock ticks of /proc/stat's first line: all CPUs' busy and total time (USER_HZ is 100 on Linux). */
const TICKS_PER_S = 100;
function cpuTicks() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3] + (f[4] ?? 0);
  const total = f.slice(0, 8).reduce((x, y) => x + y, 0);
  return { busy: total - idle, total };
}

/**
 * CPU time (ms) of the server, redis-server and the workers with every process under them, live or reaped: runners
 * (a warm runner that served a run lives on in its worker's pool) and, through them, agents. What the runs cost,
 * without what else the machine is doing.
 */
function treeCpuMs(serverPid) {
  const stat = new Map(); // pid → { ppid, own, reaped } in clock ticks
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const f = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      const x = f.slice(f.lastIndexOf(')') + 2).split(' ').map(Number);
      stat.set(Number(name), { ppid: x[1], own: x[11] + x[12], reaped: x[13] + x[14] });
    } catch { /* gone */ }
  }
  const kids = new Map();
  for (const [pid, s] of stat) { if (!kids.has(s.ppid)) kids.set(s.ppid, []); kids.get(s.ppid).push(pid); }
  const under = (pid) => {
    const s = stat.get(pid);
    if (!s) return 0;
    return s.own + s.reaped + (kids.get(pid) ?? []).reduce((sum, k) => sum + under(k), 0);
  };
  const own = (pid) => stat.get(pid)?.own ?? 0;
  const ticks = own(serverPid) + own(redis.pid) + workers.reduce((sum, w) => sum + under(w.pid), 0);
  return (ticks * 1000) / TICKS_PER_S;
}

const h = tempHome('sa-bench-redis-');
const workers = [];
let started = 0;
function startWorker(n) {
  const home = path.join(h.base, `worker-${n}-${started++}`);
  fs.mkdirSync(home, { mode: 0o700 });
  writeAgent(home, 'echo', { backend: 'command', command: ['node', FAKE_AGENT, 'echo'] });
  // A true 1 s agent: /bin/sleep costs no CPU of its own, so the figure is the runs' path, not node boots of a fake agent.
  writeAgent(home, 'second', { backend: 'command', command: ['/bin/sleep', '1'] });
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

  const WAVES = Math.max(3, Number(process.env.BENCH_REDIS_WAVES) || 8);
  let single = null;
  for (const count of [1, 2, 4]) {
    for (let i = 0; i < count; i++) await startWorker(count);
    const slots = 2 * count;
    const runs = slots * WAVES;
    const cpu0 = cpuTicks();
    const tree0 = treeCpuMs(dist.pid);
    const ids = [];
    for (let i = 0; i < runs; i++) ids.push((await dist.call('launch', { agent: 'second', task: String(i) })).structuredContent.runId);
    const ends = [];
    const agentMs = [];
    for (const runId of ids) {
      for (;;) {
        const st = (await dist.call('status', { runId, waitMs: 30_000, until: 'terminal' })).structuredContent;
        if (['completed', 'failed', 'cancelled'].includes(st.state)) {
          if (st.state !== 'completed') throw new Error(`run ${runId} ${st.state}`);
          ends.push(Date.parse(st.endedAt));
          agentMs.push(Date.parse(st.steps[0].endedAt) - Date.parse(st.steps[0].startedAt));
          break;
        }
      }
    }
    const cpu1 = cpuTicks();
    await sleep(500); // the last runs' runners back in their pools or reaped
    const tree1 = treeCpuMs(dist.pid);
    ends.sort((x, y) => x - y);
    // From the end of the first wave to the last end: runs - slots runs ended in that window.
    const windowS = (ends[runs - 1] - ends[slots - 1]) / 1000;
    const perSec = (runs - slots) / windowS;
    single ??= perSec;
    const busyCores = ((cpu1.busy - cpu0.busy) / (cpu1.total - cpu0.total)) * os.cpus().length;
    const cpuPerRunMs = (tree1 - tree0) / runs;
    const ceiling = (os.cpus().length * 1000) / cpuPerRunMs;
    // The share of slot time spent running agents: 1 would be no time between one run's agent and the next's.
    const agentS = stats(agentMs).median / 1000;
    const slotUse = (perSec * agentS) / slots;
    note(`redis: steady throughput of 1 s agents, ${count} worker(s) × concurrency 2: ${perSec.toFixed(2)} runs/s (${runs - slots} runs in ${windowS.toFixed(1)} s after the first wave), ${(perSec / (single * count)).toFixed(2)} × linear, slots busy with agents ${(slotUse * 100).toFixed(0)}% of the time (median agent step ${(agentS * 1000).toFixed(0)} ms); machine CPU ${busyCores.toFixed(2)} of ${os.cpus().length} cores busy; ${cpuPerRunMs.toFixed(0)} ms CPU per run (server, Redis, workers, runners, agents), so this machine's cores carry at most ${ceiling.toFixed(1)} runs/s`);
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
