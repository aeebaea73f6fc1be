// The queue (docs/limits.md, "The queue"). Two figures, each against a baseline measured in the same run:
// 1. slot hand-off: a run's agent ends → the next queued run's agent has started, at a cap of 1. Its floor is a bare
//    detached handshake (spawn → ready → proceed → started) plus one fs.watch wake-up: what any hand-off must do.
// 2. a queue 1 000 deep at a cap of 8: the latency of a launch that is queued, and of a `status` list, against the same
//    calls with an empty queue. The list is timed from a second MCP session with the same few runs of its own in both
//    cases (the queue's cost alone), and from the session that owns the queue (which also lists its newest 200 runs).
// Speed never fails it; every figure is printed with its ratio.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { bareHandshake, note, now, reapHome, report, runBench, scaled, serverEnv, sleep, startServer, stats, tempHome, until, writeAgent } from './lib.mjs';

const DEPTH = Number(process.env.BENCH_QUEUE_DEPTH) || 1000;
const CAP = 8;

/** Nanosecond wall clock, as `date +%s%N` in the agents prints it. */
const readNs = (file) => BigInt(fs.readFileSync(file, 'utf8').trim());

/** Medians of one fs.watch wake-up: a file created → the watcher of its directory called, in this process. */
async function watchWakeups(n) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-watch-'));
  const xs = [];
  try {
    for (let i = 0; i < n + 2; i++) {
      const ms = await new Promise((resolve) => {
        let t0 = 0;
        const w = fs.watch(dir, () => { w.close(); resolve(now() - t0); });
        t0 = now();
        fs.writeFileSync(path.join(dir, String(i)), '');
      });
      if (i >= 2) xs.push(ms);
    }
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
  return stats(xs);
}

async function handOffLatency() {
  const n = scaled(15);
  const h = tempHome();
  // Both agents stamp the wall clock: the first as its last act before it exits, the second as its first.
  writeAgent(h.home, 'ender', { backend: 'command', command: ['sh', '-c', 'read -r f; while [ ! -e "$f" ]; do sleep 0.002; done; date +%s%N > "$f.end"'] });
  writeAgent(h.home, 'starter', { backend: 'command', command: ['sh', '-c', 'read -r f; date +%s%N > "$f"'] });
  const s = await startServer(serverEnv(h, { SUBAGENTS_MAX_ACTIVE_RUNS: '1' }));
  const handOffMs = [];
  try {
    for (let i = 0; i < n + 2; i++) {
      const gate = path.join(h.base, `gate-${i}`);
      const stamp = path.join(h.base, `stamp-${i}`);
      const a = await s.call('launch', { agent: 'ender', task: gate });
      const b = await s.call('launch', { agent: 'starter', task: stamp });
      if (b.structuredContent.state !== 'queued') throw new Error(`the second launch was ${b.structuredContent.state}, not queued`);
      fs.writeFileSync(gate, '');
      await until(() => fs.existsSync(stamp) && fs.readFileSync(stamp, 'utf8').endsWith('\n') && fs.existsSync(`${gate}.end`), 30_000, 2);
      const ms = Number(readNs(stamp) - readNs(`${gate}.end`)) / 1e6;
      if (i >= 2) handOffMs.push(ms);
      for (const id of [a.structuredContent.runId, b.structuredContent.runId]) await s.call('status', { runId: id, waitMs: 20_000, until: 'terminal' });
    }
  } finally {
    await s.close();
    await reapHome(h.home);
    h.cleanup();
  }
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-floor-'));
  const bare = [];
  try {
    for (let i = 0; i < n + 2; i++) {
      const r = await bareHandshake(path.join(base, String(i)));
      if (i >= 2) bare.push(r.startedMs);
    }
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
  }
  const bareStats = stats(bare);
  const wake = await watchWakeups(n);
  const floor = bareStats.median + wake.median;
  note(`floor parts: bare handshake ${bareStats.median.toFixed(1)} ms + one fs.watch wake-up ${wake.median.toFixed(2)} ms`);
  report('queue: slot hand-off (agent end → next queued agent started), cap 1', handOffMs, floor, { note: 'target ≤ 1.5×' });
}

async function timeCalls(fn, n) {
  const xs = [];
  for (let i = 0; i < n + 2; i++) {
    const t0 = now();
    await fn(i);
    if (i >= 2) xs.push(now() - t0);
  }
  return stats(xs);
}

/** The latency of a launch that is queued (only the launch is timed); each is cancelled after, so the depth stays. */
async function enqueueTimes(s, gate, n) {
  const xs = [];
  for (let i = 0; i < n + 2; i++) {
    const t0 = now();
    const r = await s.call('launch', { agent: 'hold', task: gate });
    if (i >= 2) xs.push(now() - t0);
    if (r.structuredContent.state !== 'queued') throw new Error(`a measured launch was ${r.structuredContent.state}, not queued`);
    await s.call('cancel', { runId: r.structuredContent.runId });
  }
  return stats(xs);
}

async function deepQueue() {
  const n = scaled(20);
  const h = tempHome();
  writeAgent(h.home, 'hold', { backend: 'command', command: ['sh', '-c', 'read -r f; while [ ! -e "$f" ]; do sleep 0.05; done'] });
  const gate = path.join(h.base, 'never');
  const env = serverEnv(h, { SUBAGENTS_MAX_ACTIVE_RUNS: String(CAP), SUBAGENTS_MAX_QUEUED: String(DEPTH + 4 * n + 100), SUBAGENTS_MAX_AGENTS: '64' });
  const owner = await startServer(env);
  const other = await startServer(env);
  try {
    // The slots: half the other session's runs (what its list shows in both cases), half the queue owner's.
    for (let i = 0; i < CAP / 2; i++) await other.call('launch', { agent: 'hold', task: gate });
    for (let i = 0; i < CAP / 2; i++) await owner.call('launch', { agent: 'hold', task: gate });
    // Empty queue: each measured launch is queued and then cancelled, so the queue stays empty.
    const enqueueEmpty = await enqueueTimes(owner, gate, n);
    const listOtherEmpty = await timeCalls(() => other.call('status', {}), n);
    const listOwnerEmpty = await timeCalls(() => owner.call('status', {}), n);
    // Fill the queue (four launches in flight), then measure at depth.
    let made = 0;
    const t0 = now();
    await Promise.all(Array.from({ length: 4 }, async () => {
      while (made < DEPTH) { made++; await owner.call('launch', { agent: 'hold', task: gate }); }
    }));
    note(`filled a queue of ${DEPTH} in ${((now() - t0) / 1000).toFixed(1)} s`);
    const enqueueDeep = await enqueueTimes(owner, gate, n);
    const listOtherDeep = await timeCalls(() => other.call('status', {}), n);
    const listOwnerDeep = await timeCalls(() => owner.call('status', {}), n);
    report(`queue: a queued launch at depth ${DEPTH}, cap ${CAP}`, enqueueDeep, enqueueEmpty, { note: 'baseline: the same at an empty queue; target ≤ 1.2×' });
    report(`queue: status list of another session at depth ${DEPTH}`, listOtherDeep, listOtherEmpty, { note: 'baseline: empty queue; target ≤ 1.2×' });
    report(`queue: status list of the queue's own session at depth ${DEPTH}`, listOwnerDeep, listOwnerEmpty, { note: `baseline: empty queue (${CAP} runs); at depth it lists its newest 200 runs` });
  } finally {
    await owner.close();
    await other.close();
    await reapHome(h.home, 500);
    h.cleanup();
  }
}

runBench(async () => {
  await handOffLatency();
  await sleep(200);
  await deepQueue();
});
