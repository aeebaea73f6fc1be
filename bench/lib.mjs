// Shared helpers of the benchmarks: statistics, a clean environment, temp state homes, the built server over the
// SDK client, and the floors every figure is compared with. Benchmarks print figures; they never fail on speed.
import { spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';

export const BENCH_DIR = path.dirname(fileURLToPath(import.meta.url));
export const REPO = path.resolve(BENCH_DIR, '..');
/** The built bin, as users run it (`npm run bench` builds first). */
export const MAIN_JS = process.env.BENCH_MAIN_JS ? path.resolve(process.env.BENCH_MAIN_JS) : path.join(REPO, 'dist', 'main.js');
export const FIXTURES = path.join(BENCH_DIR, 'fixtures');
export const FAKE_AGENT = path.join(REPO, 'test', 'fixtures', 'agents', 'fake-agent.mjs');

/** Samples per figure: ≥ 30 by default; BENCH_SAMPLES scales every bench down (or up). */
export const SAMPLES = Math.max(1, Number(process.env.BENCH_SAMPLES) || 30);
/** A figure's sample count scaled like SAMPLES (e.g. a costly figure that uses a third of the samples). */
export const scaled = (n) => Math.max(1, Math.round((n * SAMPLES) / 30));

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
export const now = () => performance.now();
/** Wall clock with sub-millisecond resolution (CLOCK_REALTIME, like file timestamps and Date). */
export const wallNow = () => performance.timeOrigin + performance.now();

export function quantile(sorted, q) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

export function stats(xs) {
  const s = [...xs].sort((a, b) => a - b);
  return { n: s.length, median: quantile(s, 0.5), p90: quantile(s, 0.9), min: s[0], max: s[s.length - 1] };
}

const fmt = (v, unit) => (unit === 'ms' ? (v >= 100 ? v.toFixed(0) : v.toFixed(1)) : v.toFixed(1));

/**
 * Prints one figure: `name: median X ms, p90 Y ms, floor Z ms, ratio R` (ratio = median / floor median, or the
 * given ratio). `floor` is a stats object, a number, or null (no floor); `note` is appended in brackets.
 */
export function report(name, samples, floor, o = {}) {
  const unit = o.unit ?? 'ms';
  const s = Array.isArray(samples) ? stats(samples) : samples;
  const f = floor === null || floor === undefined ? null : typeof floor === 'number' ? floor : floor.median;
  const parts = [`median ${fmt(s.median, unit)} ${unit}`, `p90 ${fmt(s.p90, unit)} ${unit}`];
  if (f !== null) parts.push(`floor ${fmt(f, unit)} ${unit}`);
  const ratio = o.ratio ?? (f !== null && f > 0 ? s.median / f : null);
  if (ratio !== null && ratio !== undefined) parts.push(`ratio ${ratio.toFixed(2)}`);
  const line = `${name}: ${parts.join(', ')}${o.note ? ` [${o.note}]` : ''}`;
  process.stdout.write(`${line}\n`);
  results.push({ name, unit, median: s.median, p90: s.p90, n: s.n, floor: f, ratio: ratio ?? null, note: o.note ?? null });
  return line;
}

/** Every figure printed by this process (run-all can collect them as JSON with BENCH_JSON). */
export const results = [];
process.on('exit', () => {
  if (process.env.BENCH_JSON && results.length) {
    fs.appendFileSync(process.env.BENCH_JSON, results.map((r) => JSON.stringify({ bench: path.basename(process.argv[1] ?? ''), ...r })).join('\n') + '\n');
  }
});

export function note(text) {
  process.stdout.write(`  ${text}\n`);
}

/**
 * The environment every measured process gets: PATH and HOME only (plus extras). Never NODE_EXTRA_CA_CERTS or
 * NODE_OPTIONS: an inherited CA bundle doubles every Node start here, so both sides of a ratio go without it.
 */
export function cleanEnv(extra = {}) {
  const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: process.env.HOME ?? os.tmpdir() };
  for (const k of ['LANG', 'TERM', 'USER', 'LOGNAME', 'SHELL', 'TMPDIR']) if (process.env[k]) env[k] = process.env[k];
  return { ...env, ...extra };
}

// Temp state homes: removed by their cleanup, and on exit whatever is left (a bench that threw).
const homes = new Set();
process.on('exit', () => { for (const b of homes) try { fs.rmSync(b, { recursive: true, force: true }); } catch { /* best effort */ } });
for (const sig of ['SIGINT', 'SIGTERM']) process.on(sig, () => process.exit(130));

/** A fresh private state home and workspace root; `cleanup()` removes both. */
export function tempHome(prefix = 'sa-bench-') {
  const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), prefix)));
  const home = path.join(base, 'home');
  const root = path.join(base, 'work');
  fs.mkdirSync(home, { mode: 0o700 });
  fs.mkdirSync(root, { mode: 0o700 });
  homes.add(base);
  return {
    base, home, root,
    cleanup: () => { fs.rmSync(base, { recursive: true, force: true }); homes.delete(base); },
  };
}

/** Writes an operator agent file into the home. */
export function writeAgent(home, name, frontMatter, body = 'You are a benchmark agent.') {
  const dir = path.join(home, 'agents');
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const lines = Object.entries({ name, description: `bench agent ${name}`, ...frontMatter }).map(([k, v]) => `${k}: ${JSON.stringify(v)}`);
  fs.writeFileSync(path.join(dir, `${name}.md`), `---\n${lines.join('\n')}\n---\n${body}\n`, { mode: 0o600 });
}

/** The settings every bench server runs with: its own home and root, no capacity limit in the way. */
export function serverEnv(h, extra = {}) {
  return cleanEnv({ SUBAGENTS_HOME: h.home, SUBAGENTS_ROOTS: h.root, SUBAGENTS_MAX_ACTIVE_RUNS: '0', SUBAGENTS_MAX_AGENTS: '64', ...extra });
}

/**
 * Starts a stdio MCP server (ours by default) as a child process and connects the SDK client.
 * Returns the client, `call(name, args)`, the server pid, and `connectMs` (spawn → initialize done).
 */
export async function startServer(env, o = {}) {
  const command = o.command ?? process.execPath;
  const args = o.args ?? [MAIN_JS, 'serve'];
  const t0 = now();
  const transport = new StdioClientTransport({ command, args, env, stderr: 'pipe', cwd: o.cwd });
  let err = '';
  transport.stderr?.on('data', (c) => { err += c.toString(); if (err.length > 100_000) err = err.slice(-50_000); });
  const client = new Client({ name: 'bench', version: '1' }, { capabilities: {} });
  try {
    await client.connect(transport);
  } catch (e) {
    throw new Error(`${[command, ...args].join(' ')} did not start: ${e.message}; its stderr: ${err.slice(-2000)}`);
  }
  const connectMs = now() - t0;
  const call = async (name, a = {}, opts = {}) => {
    const r = await client.callTool({ name, arguments: a }, undefined, { timeout: 120_000, ...opts });
    if (r.isError && !opts.allowError) throw new Error(`${name} refused: ${r.content?.[0]?.text ?? '?'}`);
    return r;
  };
  return {
    client, transport, call, connectMs, t0, pid: transport.pid, stderr: () => err,
    close: async () => { await client.close().catch(() => {}); await waitExit(transport.pid, 3000); },
  };
}

/** Resolves when the pid is gone (or after maxMs). */
export async function waitExit(pid, maxMs = 3000) {
  const end = now() + maxMs;
  while (pid && alive(pid) && now() < end) await sleep(10);
}

/** Alive and not a zombie. */
export function alive(pid) {
  try {
    const st = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    return !/\) Z /.test(st);
  } catch {
    return false;
  }
}

/** Resident set size of a process, in MiB. */
export function rssMiB(pid) {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) / 1024 : NaN;
  } catch {
    return NaN;
  }
}

/**
 * CPU time a process has spent on a CPU so far, in ms (/proc/<pid>/schedstat, ns resolution). Unlike wall time it
 * hardly moves with the machine's load, so it is the steadier figure when other work shares the cores.
 */
export function cpuMs(pid) {
  try {
    return Number(fs.readFileSync(`/proc/${pid}/schedstat`, 'utf8').split(' ')[0]) / 1e6;
  } catch {
    return NaN;
  }
}

/**
 * Every live process of a bench home's runs: runners (their command line names the home's run directory) and agents
 * with their descendants (their environment carries SUBAGENTS_HOME=<home> and a run token). Never the server.
 */
export function processesOfHome(home) {
  const entry = `SUBAGENTS_HOME=${home}`;
  const out = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name) || Number(name) === process.pid) continue;
    try {
      const cmd = fs.readFileSync(`/proc/${name}/cmdline`, 'latin1');
      const env = fs.readFileSync(`/proc/${name}/environ`, 'latin1').split('\0');
      const ours = cmd.includes(`${home}/runs/`) || cmd.includes(`${home}/warm`) || (env.includes(entry) && env.some((e) => e.startsWith('SUBAGENTS_RUN_TOKEN=')));
      if (ours && alive(Number(name))) out.push(Number(name));
    } catch { /* gone or not ours */ }
  }
  return out;
}

/** Leaves no process behind: waits a little for the home's processes to end, then SIGKILLs what is left. */
export async function reapHome(home, maxWaitMs = 3000) {
  const end = now() + maxWaitMs;
  let left = processesOfHome(home);
  while (left.length && now() < end) { await sleep(50); left = processesOfHome(home); }
  for (const pid of left) try { process.kill(pid, 'SIGKILL'); } catch { /* gone */ }
  // Gone before the caller goes on: a killed idle runner still alive for a moment would be taken by the next launch.
  const killed = now() + 2000;
  while (left.some((pid) => alive(pid)) && now() < killed) await sleep(5);
  return left.length;
}

/** Waits until `fn()` is truthy (polling), up to maxMs. */
export async function until(fn, maxMs = 30_000, stepMs = 5) {
  const end = now() + maxMs;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (now() > end) throw new Error('timed out waiting');
    await sleep(stepMs);
  }
}

/** spawn → exit of a command, `n` times (after `warm` discarded rounds). */
export async function spawnExitTimes(argv, n, o = {}) {
  const xs = [];
  for (let i = 0; i < n + (o.warm ?? 2); i++) {
    const t0 = now();
    await new Promise((resolve, reject) => {
      const c = spawn(argv[0], argv.slice(1), { stdio: o.stdio ?? 'ignore', env: o.env ?? cleanEnv() });
      c.on('error', reject);
      c.on('close', resolve);
    });
    if (i >= (o.warm ?? 2)) xs.push(now() - t0);
  }
  return xs;
}

/** The floor of every Node start: `node -e 0` spawn → exit, clean environment. */
export async function nodeFloor(n = SAMPLES) {
  return stats(await spawnExitTimes([process.execPath, '-e', '0'], n));
}

/**
 * One bare detached-runner handshake, the shape of ours minus everything else: spawn a builtins-only node runner
 * detached with stdio to a file, wait (fs.watch) for its ready file, write proceed, wait for its started file.
 * Resolves { readyMs, startedMs, pid } and leaves the runner sleeping `holdMs` (then it exits on its own).
 * `o.lean`: the lean floor runner (floor-runner.cjs says how it differs).
 */
export async function bareHandshake(dir, o = {}) {
  fs.mkdirSync(dir, { recursive: true, mode: 0o700 });
  const t0 = now();
  const log = fs.openSync(path.join(dir, 'runner.log'), 'a', 0o600);
  const child = spawn(process.execPath, [path.join(FIXTURES, o.lean ? 'floor-runner.cjs' : 'floor-runner.mjs'), dir, String(o.holdMs ?? 0)], {
    detached: true, stdio: ['ignore', log, log], env: cleanEnv(), cwd: dir,
  });
  fs.closeSync(log);
  child.unref();
  const seen = (name) => waitForName(dir, name);
  await seen('ready.json');
  const readyMs = now() - t0;
  atomicWrite(path.join(dir, 'proceed.json'), JSON.stringify({ at: Date.now() }));
  await seen('started.json');
  return { readyMs, startedMs: now() - t0, pid: child.pid };
}

/** Resolves when `dir/name` exists: fs.watch on the directory, with a slow poll behind it. */
export function waitForName(dir, name, maxMs = 30_000) {
  const file = path.join(dir, name);
  return new Promise((resolve, reject) => {
    let w;
    const done = (ok) => { clearInterval(poll); clearTimeout(timer); w?.close(); ok ? resolve() : reject(new Error(`no ${name}`)); };
    const check = () => { if (fs.existsSync(file)) done(true); };
    const poll = setInterval(check, 250);
    const timer = setTimeout(() => done(false), maxMs);
    try { w = fs.watch(dir, check); w.on('error', () => {}); } catch { /* poll */ }
    check();
  });
}

export function atomicWrite(file, text) {
  const tmp = `${file}.${process.pid}.tmp`;
  fs.writeFileSync(tmp, text, { mode: 0o600 });
  fs.renameSync(tmp, file);
}

/** `n` sequential bare handshakes (after 2 warm-ups): the floor of one launch. */
export async function handshakeFloor(n = SAMPLES) {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-floor-'));
  homes.add(base);
  const ready = [];
  const started = [];
  try {
    for (let i = 0; i < n + 2; i++) {
      const r = await bareHandshake(path.join(base, String(i)));
      if (i >= 2) { ready.push(r.readyMs); started.push(r.startedMs); }
    }
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
    homes.delete(base);
  }
  return { ready: stats(ready), started: stats(started) };
}

/** Wall time of `k` concurrent bare handshakes, `n` rounds: the floor of k concurrent launches (`o`: bareHandshake's). */
export async function handshakeFloorConcurrent(k, n, o = {}) {
  const base = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-floor-'));
  homes.add(base);
  const walls = [];
  try {
    for (let i = 0; i < n + 1; i++) {
      const t0 = now();
      await Promise.all(Array.from({ length: k }, (_, j) => bareHandshake(path.join(base, `${i}-${j}`), o)));
      if (i >= 1) walls.push(now() - t0);
      await sleep(50);
    }
  } finally {
    fs.rmSync(base, { recursive: true, force: true });
    homes.delete(base);
  }
  return stats(walls);
}

/**
 * The floor of a wake-up: a plain child process renames a file carrying its own sub-ms wall-clock stamp while this
 * process waits on fs.watch; each sample is that rename seen → delivered here.
 */
export async function watchFloor(dir, n) {
  const writer = spawn(process.execPath, ['-e', `
    const fs = require('fs'); const path = require('path'); const dir = process.argv[1];
    process.stdin.on('data', (d) => { for (const c of d.toString()) if (c === '\\n') {
      const f = path.join(dir, 'status.json'); const t = f + '.tmp';
      fs.writeFileSync(t, String(performance.timeOrigin + performance.now())); fs.renameSync(t, f);
    } });`, dir], { stdio: ['pipe', 'ignore', 'inherit'], env: cleanEnv() });
  const xs = [];
  const file = path.join(dir, 'status.json');
  for (let i = 0; i < n + 3; i++) {
    try { fs.unlinkSync(file); } catch { /* first */ }
    const seen = new Promise((resolve) => {
      const w = fs.watch(dir, () => {
        let stamp;
        try { stamp = Number(fs.readFileSync(file, 'utf8')); } catch { return; }
        if (!stamp) return;
        const at = wallNow();
        w.close();
        resolve(at - stamp);
      });
    });
    writer.stdin.write('\n');
    const d = await seen;
    if (i >= 3) xs.push(d);
    await sleep(20);
  }
  writer.kill();
  return xs;
}

/** Runs `main` and exits (the SDK client's transports and stray timers must not keep a bench alive). */
export function runBench(main) {
  main().then(
    () => process.exit(0),
    (e) => { process.stderr.write(`${process.argv[1]}: ${e?.stack ?? e}\n`); process.exit(1); },
  );
}

/**
 * One real run of an `instant` agent (the temp home `h` must define it), as the template of generated history; its directory
 * is removed again, so the home holds only what the caller generates.
 */
export async function templateRun(h) {
  const home = h.home;
  const s = await startServer(serverEnv(h));
  const runId = (await s.call('launch', { agent: 'instant', task: 'x' })).structuredContent.runId;
  await s.call('status', { runId, waitMs: 30_000, until: 'terminal' });
  await s.close();
  const dir = path.join(home, 'runs', runId);
  const template = { record: JSON.parse(fs.readFileSync(path.join(dir, 'run.json'), 'utf8')), status: JSON.parse(fs.readFileSync(path.join(dir, 'status.json'), 'utf8')) };
  fs.rmSync(dir, { recursive: true, force: true });
  await reapHome(home);
  return template;
}

const newId = (p) => `${p}-${randomBytes(18).toString('base64url')}`;

/**
 * Writes `count` finished runs owned by other sessions (a new session every 10 runs) straight to disk in the store's
 * format (run.json and status.json: what listings and sweeps read), modelled on `template`.
 */
export function generateFinishedRuns(home, template, count) {
  const runsDir = path.join(home, 'runs');
  const sessionsDir = path.join(home, 'sessions');
  fs.mkdirSync(runsDir, { recursive: true, mode: 0o700 });
  fs.mkdirSync(sessionsDir, { recursive: true, mode: 0o700 });
  let session = null;
  const base = Date.now() - 30 * 24 * 3600 * 1000;
  for (let i = 0; i < count; i++) {
    if (i % 10 === 0) {
      session = newId('s');
      fs.writeFileSync(path.join(sessionsDir, `${session}.json`), JSON.stringify({ v: 1, sessionId: session, startedAt: new Date(base).toISOString(), client: { name: 'bench', version: '1' }, ancestors: [] }), { mode: 0o600 });
    }
    const runId = newId('r');
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
