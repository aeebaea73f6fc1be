// Shutdown under Claude Code's stop sequence: SIGINT, SIGTERM 100 ms later, SIGKILL at 500 ms, stdin never closed.
// Each round starts the built server, speaks MCP to it over its stdin (initialize, tools/list, a status), then sends
// the sequence and times SIGINT → exit. Two shapes: an idle server, and a busy one (a run active, a status long-poll
// waiting on it, and a launch sent just before the signal, so an abandoned handshake is under way). The floor is the
// minimal SDK server (bench/fixtures/min-server.mjs), which has no handler and dies of the SIGINT itself.
// After the rounds, the state home is checked: lock directories left, temp files left, runs still `starting`, and
// whether a fresh server launches at once. BENCH_SHUTDOWN_ROUNDS sets the rounds per shape (default 50).
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { FAKE_AGENT, FIXTURES, MAIN_JS, note, now, processesOfHome, reapHome, report, runBench, serverEnv, sleep, startServer, stats, tempHome, writeAgent } from './lib.mjs';

const ROUNDS = Math.max(1, Number(process.env.BENCH_SHUTDOWN_ROUNDS) || 50);

/** A stdio MCP peer over a raw child process: requests by id, answers by id, stdin kept open to the end. */
function rawServer(args, env) {
  const child = spawn(process.execPath, args, { env, stdio: ['pipe', 'pipe', 'pipe'] });
  const waiting = new Map();
  let buf = '';
  let nextId = 1;
  child.stdout.on('data', (c) => {
    buf += c.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, i);
      buf = buf.slice(i + 1);
      let m;
      try { m = JSON.parse(line); } catch { continue; }
      if (m.id !== undefined && waiting.has(m.id)) { waiting.get(m.id)(m); waiting.delete(m.id); }
    }
  });
  child.stderr.on('data', () => {});
  child.stdin.on('error', () => {});
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal, at: now() })));
  const send = (msg) => child.stdin.write(`${JSON.stringify({ jsonrpc: '2.0', ...msg })}\n`);
  const request = (method, params) => {
    const id = nextId++;
    send({ id, method, params });
    return new Promise((resolve) => waiting.set(id, resolve));
  };
  return { child, exited, send, request };
}

async function handshake(p) {
  await p.request('initialize', { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'bench-shutdown', version: '1' } });
  p.send({ method: 'notifications/initialized' });
  await p.request('tools/list', {});
}

/** Claude Code's sequence; resolves with SIGINT → exit in ms and how the process ended. */
async function stopLikeClaudeCode(p) {
  const t0 = now();
  p.child.kill('SIGINT');
  const term = setTimeout(() => p.child.kill('SIGTERM'), 100);
  const kill = setTimeout(() => p.child.kill('SIGKILL'), 500);
  const e = await p.exited;
  clearTimeout(term);
  clearTimeout(kill);
  return { ms: e.at - t0, killed: e.signal === 'SIGKILL', signal: e.signal, code: e.code };
}

/** Lock directories, temp files and `starting` runs left in a state home. */
function leftovers(home) {
  const locks = [];
  const temps = [];
  const walk = (dir) => {
    for (const d of fs.readdirSync(dir, { withFileTypes: true })) {
      const p = path.join(dir, d.name);
      if (d.name.endsWith('.lock')) locks.push(path.relative(home, p));
      else if (d.name.startsWith('.') && d.name.endsWith('.tmp')) temps.push(path.relative(home, p));
      else if (d.isDirectory()) walk(p);
    }
  };
  walk(home);
  return { locks, temps };
}

runBench(async () => {
  const h = tempHome('sa-bench-shutdown-');
  writeAgent(h.home, 'long', { backend: 'command', command: ['node', FAKE_AGENT, 'sleep', '600000'] });
  writeAgent(h.home, 'echo', { backend: 'command', command: ['node', FAKE_AGENT, 'echo'] });
  const env = serverEnv(h);
  const floor = [];
  const idle = [];
  const busy = [];
  let killed = 0;
  let busyLaunchesAnswered = 0;
  try {
    for (let i = 0; i < ROUNDS; i++) {
      // Floor: the minimal SDK server, the same sequence.
      const f = rawServer([path.join(FIXTURES, 'min-server.mjs')], env);
      await handshake(f);
      floor.push((await stopLikeClaudeCode(f)).ms);

      // Idle: connected, the core loaded by one call.
      const s = rawServer([MAIN_JS, 'serve'], env);
      await handshake(s);
      await s.request('tools/call', { name: 'status', arguments: {} });
      const r1 = await stopLikeClaudeCode(s);
      idle.push(r1.ms);
      if (r1.killed) killed++;

      // Busy: a run active, a long-poll waiting on it, a launch in flight.
      const b = rawServer([MAIN_JS, 'serve'], env);
      await handshake(b);
      const l = await b.request('tools/call', { name: 'launch', arguments: { agent: 'long', task: 'wait' } });
      const runId = l.result?.structuredContent?.runId;
      void b.request('tools/call', { name: 'status', arguments: { runId, waitMs: 30000, until: 'terminal' }, _meta: { progressToken: 1 } });
      const launching = b.request('tools/call', { name: 'launch', arguments: { agent: 'echo', task: 'abandoned' } });
      void launching.then(() => { busyLaunchesAnswered++; });
      await sleep(i % 5); // the signal lands at different points of that launch
      const r2 = await stopLikeClaudeCode(b);
      busy.push(r2.ms);
      if (r2.killed) killed++;
    }
    report('shutdown, minimal SDK server (floor: no handler, dies of SIGINT)', floor, null);
    report('shutdown, idle', idle, stats(floor));
    report('shutdown, busy (active run, long-poll, launch in flight)', busy, stats(floor));
    note(`max SIGINT → exit: idle ${Math.max(...idle).toFixed(1)} ms, busy ${Math.max(...busy).toFixed(1)} ms over ${ROUNDS} rounds each; `
      + `${killed} of ${2 * ROUNDS} needed the SIGKILL; ${busyLaunchesAnswered} in-flight launches answered before the exit`);

    // What the next server finds: no lock left, and a launch answers at once (a stranded lock would make it wait for
    // the lock's stale time, then BUSY).
    const left = leftovers(h.home);
    const next = await startServer(env);
    const t0 = now();
    const r = await next.call('launch', { agent: 'echo', task: 'after the shutdowns' }, { allowError: true });
    const launchMs = now() - t0;
    await next.close();
    // Every run's recorded state (each round's server was its own session: read the files, not a listing).
    const states = {};
    for (const id of fs.readdirSync(path.join(h.home, 'runs'))) {
      let state = 'unreadable';
      try { state = JSON.parse(fs.readFileSync(path.join(h.home, 'runs', id, 'status.json'), 'utf8')).state; } catch { /* counted as such */ }
      states[state] = (states[state] ?? 0) + 1;
    }
    // Whose each lock is: the run's state, and whether a process of that run (its runner) still lives.
    const lockInfo = left.locks.map((l) => {
      const m = /^runs\/([^/]+)\//.exec(l);
      if (!m) return l;
      let state = '?';
      try { state = JSON.parse(fs.readFileSync(path.join(h.home, 'runs', m[1], 'status.json'), 'utf8')).state; } catch { /* unreadable */ }
      const live = processesOfHome(h.home).some((pid) => { try { return fs.readFileSync(`/proc/${pid}/cmdline`, 'latin1').includes(m[1]); } catch { return false; } });
      return `${l} (run ${state}, runner ${live ? 'alive' : 'gone'})`;
    });
    note(`afterwards: ${left.locks.length} lock dirs ${JSON.stringify(lockInfo)}, ${left.temps.length} temp files ${JSON.stringify(left.temps)}; `
      + `next launch ${r.isError ? `refused: ${r.content[0].text.slice(0, 80)}` : 'answered'} in ${launchMs.toFixed(0)} ms; run states ${JSON.stringify(states)}`);
  } finally {
    await reapHome(h.home, 100);
    h.cleanup();
  }
});
