// Side by side with the most used blocking delegation server, @steipete/claude-code-mcp 1.10.12 (it spawns the agent
// inside its tools/call and blocks until it exits), in one interleaved run with the same fake agent:
//   1. instant agent, call → answer (ours: launch + status {waitMs, until: terminal})
//   2. 1 s agent, overhead over the agent alone
//   3. 8 concurrent 1 s agents, wall
//   4. cold start, spawn → tools/list answered
//   5. 4 MiB output, whole text to the client (ours: launch + status + resources/read of the output)
// plus the floors: `node -e 0`, the fake agent alone, and a bare spawn + fsync of a small file.
// The peer is installed from the npm registry into a temp cache folder (BENCH_PEER_CACHE, default
// $TMPDIR/subagents-bench-peer), never into this project; none of its code is copied here. Never fails on speed.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { SAMPLES, cleanEnv, nodeFloor, note, now, processesOfHome, reapHome, report, rssMiB, runBench, serverEnv, spawnExitTimes, startServer, stats, tempHome, writeAgent } from './lib.mjs';

const PEER = '@steipete/claude-code-mcp@1.10.12';
const CACHE = process.env.BENCH_PEER_CACHE || path.join(os.tmpdir(), 'subagents-bench-peer');
const PEER_MAIN = path.join(CACHE, 'node_modules', '@steipete', 'claude-code-mcp', 'dist', 'server.js');
const BIG_BYTES = 4 * 1024 * 1024;
const N = Math.max(3, Number(process.env.BENCH_PEER_SAMPLES) || Math.min(SAMPLES, 24));

function installPeer() {
  if (fs.existsSync(PEER_MAIN)) return;
  fs.mkdirSync(CACHE, { recursive: true });
  const r = spawnSync('npm', ['install', '--prefix', CACHE, PEER, '--no-audit', '--no-fund', '--ignore-scripts', '--no-save'], { stdio: 'inherit' });
  if (r.status !== 0 || !fs.existsSync(PEER_MAIN)) throw new Error(`could not install ${PEER} into ${CACHE}`);
}

/** One fake `claude` for both servers: the mode is a word of its arguments (theirs: the prompt; ours: the agent's argv). */
function writeFake(dir) {
  const big = path.join(dir, 'big.txt');
  fs.writeFileSync(big, 'a'.repeat(BIG_BYTES - 1) + '\n');
  const fake = path.join(dir, 'claude');
  fs.writeFileSync(fake, `#!/bin/sh\ncase "$*" in\n  *SLOW*) sleep 1; echo done ;;\n  *BIG*) cat '${big}' ;;\n  *) echo done ;;\nesac\n`, { mode: 0o755 });
  return fake;
}

async function connectPeer(fake, cwd) {
  return startServer(cleanEnv({ CLAUDE_CLI_NAME: fake, MCP_CLAUDE_DEBUG: 'false' }), { args: [PEER_MAIN], cwd });
}

const textOf = (r) => (r.content ?? []).map((c) => c.text ?? '').join('');

runBench(async () => {
  installPeer();
  const h = tempHome('sa-bench-peer-');
  const fake = writeFake(h.base);
  for (const [name, mode] of [['instant', 'INSTANT'], ['slow', 'SLOW'], ['big', 'BIG']]) {
    writeAgent(h.home, name, { backend: 'command', command: [fake, '-p', mode] });
  }
  const warm = process.env.SUBAGENTS_WARM_RUNNERS;
  const runs = process.env.SUBAGENTS_WARM_RUNNER_RUNS;
  const oursEnv = serverEnv(h, { ...(warm === undefined ? {} : { SUBAGENTS_WARM_RUNNERS: warm }), ...(runs === undefined ? {} : { SUBAGENTS_WARM_RUNNER_RUNS: runs }) });
  const ours = await startServer(oursEnv);
  const theirs = await connectPeer(fake, h.root);
  note(`${PEER} from ${CACHE}; ${N} samples each, interleaved; ours with SUBAGENTS_WARM_RUNNERS=${warm ?? 'default'}, SUBAGENTS_WARM_RUNNER_RUNS=${runs ?? 'default'}; shared, loaded machine`);
  await new Promise((r) => setTimeout(r, 2500)); // our pool's startup fill
  const idlePids = processesOfHome(h.home).filter((pid) => { try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes('--warm'); } catch { return false; } });
  const poolMiB = idlePids.reduce((sum, pid) => sum + rssMiB(pid), 0);
  note(`idle RSS: our server ${rssMiB(ours.pid).toFixed(1)} MiB + ${idlePids.length} idle runners ${poolMiB.toFixed(1)} MiB; theirs ${rssMiB(theirs.pid).toFixed(1)} MiB`);

  const oursRun = async (agent, task, read = false) => {
    const l = await ours.call('launch', { agent, task });
    const runId = l.structuredContent.runId;
    const st = await ours.call('status', { runId, waitMs: 60_000, until: 'terminal' });
    if (st.structuredContent.state !== 'completed') throw new Error(`our run ended ${st.structuredContent.state}`);
    if (!read) return st;
    const r = await ours.client.readResource({ uri: `subagents://runs/${runId}/output` });
    const got = r.contents[0].text.length;
    if (got !== BIG_BYTES) throw new Error(`our read returned ${got} characters`);
    return r;
  };
  const theirsRun = async (prompt, expectBytes = 0) => {
    const r = await theirs.call('claude_code', { prompt, workFolder: h.root }, { timeout: 120_000 });
    if (expectBytes && textOf(r).length < expectBytes - 16) throw new Error(`their answer had ${textOf(r).length} characters`);
    return r;
  };
  const timed = async (fn) => { const t0 = now(); await fn(); return now() - t0; };

  // Floors.
  const nodeE0 = await nodeFloor(N);
  const agentAlone = stats(await spawnExitTimes([fake, '-p', 'INSTANT'], N));
  const slowAlone = stats(await spawnExitTimes([fake, '-p', 'SLOW'], Math.min(N, 6), { warm: 0 }));
  const fsyncFile = path.join(h.base, 'fsync.json');
  const spawnFsync = [];
  for (let i = 0; i < N; i++) {
    const t0 = now();
    await spawnExitTimes([fake, '-p', 'INSTANT'], 1, { warm: 0 });
    const fd = fs.openSync(fsyncFile, 'w');
    fs.writeSync(fd, '{"state":"completed"}');
    fs.fsyncSync(fd);
    fs.closeSync(fd);
    spawnFsync.push(now() - t0);
  }
  report('floor: node -e 0', nodeE0, null);
  report('floor: the fake agent alone (instant)', agentAlone, null);
  report('floor: bare spawn + fsync of a small file', stats(spawnFsync), null);
  report('floor: the 1 s agent alone', slowAlone, null);

  // 1. Instant agent, 2. 1 s agent: interleaved one call each.
  const inst = { ours: [], theirs: [] };
  const slow = { ours: [], theirs: [] };
  for (let i = 0; i < N + 2; i++) {
    const a = await timed(() => oursRun('instant', 'go'));
    const b = await timed(() => theirsRun('INSTANT go'));
    if (i >= 2) { inst.ours.push(a); inst.theirs.push(b); }
  }
  for (let i = 0; i < Math.max(3, Math.round(N / 3)); i++) {
    slow.ours.push((await timed(() => oursRun('slow', 'go'))) - slowAlone.median);
    slow.theirs.push((await timed(() => theirsRun('SLOW go'))) - slowAlone.median);
  }
  const instT = stats(inst.theirs);
  report('1. instant agent, call → answer: theirs', instT, null);
  report('1. instant agent, call → answer: ours', stats(inst.ours), instT, { note: 'ratio to theirs' });
  const slowT = stats(slow.theirs);
  report('2. 1 s agent, overhead over the agent alone: theirs', slowT, null);
  report('2. 1 s agent, overhead over the agent alone: ours', stats(slow.ours), slowT, { note: 'ratio to theirs' });

  // 3. 8 concurrent 1 s agents.
  const burst = { ours: [], theirs: [] };
  for (let i = 0; i < Math.max(3, Math.round(N / 4)); i++) {
    burst.ours.push(await timed(() => Promise.all(Array.from({ length: 8 }, () => oursRun('slow', 'go')))));
    burst.theirs.push(await timed(() => Promise.all(Array.from({ length: 8 }, () => theirsRun('SLOW go')))));
    await new Promise((r) => setTimeout(r, 1000)); // the pool's refill, as between two bursts of a real session
  }
  const burstT = stats(burst.theirs);
  report('3. 8 concurrent 1 s agents, wall: theirs', burstT, null);
  report('3. 8 concurrent 1 s agents, wall: ours', stats(burst.ours), burstT, { note: 'ratio to theirs' });

  // 5. 4 MiB output, whole text to the client.
  const big = { ours: [], theirs: [] };
  for (let i = 0; i < Math.max(3, Math.round(N / 2)); i++) {
    big.ours.push(await timed(() => oursRun('big', 'go', true)));
    big.theirs.push(await timed(() => theirsRun('BIG go', BIG_BYTES)));
  }
  const bigT = stats(big.theirs);
  report('5. 4 MiB output, whole text to the client: theirs', bigT, null);
  report('5. 4 MiB output, whole text to the client: ours', stats(big.ours), bigT, { note: 'ratio to theirs' });

  await ours.close();
  await theirs.close();

  // 4. Cold start: spawn → tools/list answered, a fresh server each time, interleaved.
  const cold = { ours: [], theirs: [] };
  for (let i = 0; i < N + 1; i++) {
    for (const side of ['ours', 'theirs']) {
      const t0 = now();
      const s = side === 'ours' ? await startServer(oursEnv) : await connectPeer(fake, h.root);
      await s.client.listTools();
      const ms = now() - t0;
      await s.close();
      if (i >= 1) cold[side].push(ms);
    }
  }
  const coldT = stats(cold.theirs);
  report('4. cold start, spawn → tools/list: theirs', coldT, null);
  report('4. cold start, spawn → tools/list: ours', stats(cold.ours), coldT, { note: 'ratio to theirs' });

  await reapHome(h.home);
  h.cleanup();
});
