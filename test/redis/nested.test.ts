/**
 * Nested delegation in distributed mode (docs/scale-out.md, "Nested delegation"): an agent on a worker starts its own
 * MCP server (the delegating fixture agent), which finds the run's Redis in its step's 0600 budget file and launches
 * there. One private redis-server for the file, with a password (the secret the URL carries: it must show nowhere),
 * two real workers with their own temp state homes, one real MCP server. Every wait is bounded and waits for a
 * condition, never for a time.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/store/redis/connection.js';
import { keys } from '../../src/store/redis/keys.js';
import type { ScriptedRedis } from '../../src/store/redis/scripts.js';
import { RedisRuns } from '../../src/store/redis/run-store.js';
import { listProcesses } from '../../src/process/identity.js';
import { FIXTURE_AGENTS, MAIN_JS } from '../helpers/paths.js';
import { REDIS_SERVER, startRedis, type RedisInstance } from '../helpers/redis-server.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { skipWithout } from '../helpers/system-tools.js';

const skipped = skipWithout('redis-server', REDIS_SERVER !== null);
const suite = skipped ? describe.skip : describe;

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
const DELEGATE = path.join(FIXTURE_AGENTS, 'delegating-agent.mjs');
/** Long enough that a loaded CI machine never misses a job lock renewal. */
const STALL_MS = '10000';
const TERMINAL = ['completed', 'failed', 'cancelled'];

interface WorkerProc { child: ChildProcess; home: string; log: () => string; id: () => string | null }

let redis: RedisInstance;
/** The Redis password: the secret part of the URL, which must appear in no agent's environment, log or event. */
const secret = `pw-${randomBytes(12).toString('hex')}`;
let url: string;
let t: ReturnType<typeof tempStateHome>;
let admin: ScriptedRedis;
const workers: WorkerProc[] = [];
const servers: Started[] = [];

async function until(cond: () => boolean | Promise<boolean>, maxMs: number, what: string): Promise<void> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (!(await cond())) throw new Error(`${what} did not hold within ${maxMs} ms`);
}

async function startWorker(name: string, o: { pool?: string; concurrency?: number; stallMs?: string } = {}): Promise<WorkerProc> {
  const home = path.join(t.base, `worker-${name}`);
  fs.mkdirSync(home, { mode: 0o700 });
  const dir = path.join(home, 'agents');
  writeAgent(dir, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
  writeAgent(dir, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
  writeAgent(dir, 'delegate', { backend: 'command', command: ['node', DELEGATE, 'delegate'] });
  let out = '';
  // The URL reaches the worker through its environment (as docs/scale-out.md advises), not its argv.
  const child = spawn(process.execPath, [MAIN_JS, 'worker', '--home', home, '--concurrency', String(o.concurrency ?? 2), '--root', t.root, '--pool', o.pool ?? 'default'], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, SUBAGENTS_REDIS_URL: url, SUBAGENTS_STALL_INTERVAL_MS: o.stallMs ?? STALL_MS, SUBAGENTS_KILL_GRACE_MS: '1000' },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (c: Buffer) => { out += c.toString(); });
  const w: WorkerProc = { child, home, log: () => out, id: () => /worker (w-[\w-]+) on/.exec(out)?.[1] ?? null };
  workers.push(w);
  await until(() => w.id() !== null || child.exitCode !== null, 20_000, 'the worker\'s start');
  if (!w.id()) throw new Error(`worker did not start: ${out}`);
  return w;
}

async function server(extra: Record<string, string> = {}): Promise<Started> {
  const home = path.join(t.base, `server-${servers.length}`);
  fs.mkdirSync(home, { mode: 0o700 });
  const s = await startServer({ SUBAGENTS_HOME: home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_REDIS_URL: url, SUBAGENTS_STALL_INTERVAL_MS: STALL_MS, ...extra });
  servers.push(s);
  return s;
}

async function stored(runId: string): Promise<{ record: Record<string, any>; status: Record<string, any>; worker: string | null }> {
  const h = await admin.hgetall(keys.run(runId));
  return { record: JSON.parse(h.record!), status: JSON.parse(h.status!), worker: h.worker ?? null };
}

/** Waits until the delegating agent wrote its launch results (plan.resultsFile); returns them. */
async function resultsOf(file: string): Promise<Array<{ isError: boolean; text: string; structured: any }>> {
  await until(() => fs.existsSync(file), 60_000, 'the delegating agent\'s launch results');
  return JSON.parse(fs.readFileSync(file, 'utf8'));
}

function readProc(pid: number, what: 'environ' | 'cmdline'): string {
  try { return fs.readFileSync(`/proc/${pid}/${what}`, 'utf8'); } catch { return ''; }
}

/** A nested run's record as a nested server writes it (for the claim races, which call the scripts directly). */
function nestedRecord(runId: string, parent: string, maxSpawns: number, pool = 'race', claims = 1) {
  return {
    v: 1 as const, runId, sessionId: 's-nested-race', pool, mode: 'single' as const, cwd: '/', label: null,
    createdAt: new Date().toISOString(), agents: ['echo'], limits: { maxSpawns, maxDepth: 3 }, claims, agentSlots: 1,
    queueDeadline: Number.MAX_SAFE_INTEGER, depth: 1, rootRunId: parent, parentRunId: parent, parentStepKey: '0', maxAgents: 64,
  };
}

function startingStatus(runId: string) {
  return { v: 1 as const, runId, state: 'starting' as const, error: null, startedAt: null, endedAt: null, updatedAt: new Date().toISOString(), runner: null, steps: [], appendsTaken: 0, survivors: [] };
}

/** Ends the runs a race admitted (their agent slots come back), then closes the racing connections. */
async function endAdmitted(ids: string[], ...conns: RedisRuns[]): Promise<void> {
  for (const id of ids) {
    const run = await conns[0]!.read(id);
    if (run) await conns[0]!.endRun({ ...run.status, state: 'cancelled', endedAt: new Date().toISOString() });
  }
  for (const c of conns) c.redis.disconnect();
}

beforeAll(async () => {
  if (skipped) return;
  redis = await startRedis();
  admin = connect(redis.url, { blocking: true });
  await admin.config('SET', 'requirepass', secret);
  admin.disconnect();
  url = `redis://:${secret}@127.0.0.1:${redis.port}`;
  admin = connect(url, { blocking: true });
  t = tempStateHome('sa-redis-nested-');
  await startWorker('a');
  await startWorker('b');
}, 60_000);

afterAll(async () => {
  for (const s of servers) await s.close();
  for (const w of workers) {
    if (w.child.exitCode !== null || w.child.signalCode !== null) continue;
    const exited = new Promise((r) => w.child.once('exit', r));
    w.child.kill('SIGKILL');
    await exited;
  }
  admin?.disconnect();
  await redis?.stop();
  t?.cleanup();
}, 30_000);

suite('nested delegation from an agent on a worker goes through the same Redis', () => {
  it('the nested run is recorded in Redis with its parent, runs on a worker, completes, and is the parent step\'s child; the URL is in no agent\'s environment', async () => {
    const s = await server();
    const ready = path.join(t.base, 'ready-1');
    const go = path.join(t.base, 'go-1');
    const plan = { readyFile: ready, goFile: go, launches: [{ agent: 'echo', task: 'from the nested run' }], wait: true };
    const l = await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) });
    expect(l.isError, textOf(l)).toBeFalsy();
    const rootId = sc(l).runId as string;

    // While the agent and its nested server live: neither has the URL or its password in its environment or argv.
    await until(() => fs.existsSync(ready) && fs.readFileSync(ready, 'utf8') !== '', 60_000, 'the delegating agent\'s nested server');
    const agentPid = Number(fs.readFileSync(ready, 'utf8'));
    const nestedServers = listProcesses().filter((p) => p.ppid === agentPid).map((p) => p.pid);
    expect(nestedServers.length).toBeGreaterThan(0);
    for (const pid of [agentPid, ...nestedServers]) {
      const environ = readProc(pid, 'environ');
      expect(environ).toContain('SUBAGENTS_BUDGET=');
      expect(environ).not.toContain(secret);
      expect(environ).not.toContain('SUBAGENTS_REDIS_URL');
      expect(readProc(pid, 'cmdline')).not.toContain(secret);
    }
    fs.writeFileSync(go, '');

    const fin = await waitTerminal(s, rootId, 90_000);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const rep = JSON.parse(fin.output.text) as { env: Record<string, string>; results: Array<{ isError: boolean; text: string; structured: any }>; finals: any[] };
    expect(rep.results.map((r) => r.isError), JSON.stringify(rep.results)).toEqual([false]);
    const childId = rep.results[0]!.structured.runId as string;
    expect(rep.finals[0].state).toBe('completed');
    expect(rep.finals[0].output.text).toBe('from the nested run');
    // Charged to the tree (root 1 + nested 1), not to the active-run capacity.
    expect(rep.results[0]!.structured.fanout.used).toBe(2);
    expect(Object.keys(rep.env)).not.toContain('SUBAGENTS_REDIS_URL');
    expect(JSON.stringify(rep.env)).not.toContain(secret);

    // In Redis: the child names its parent, root, step and depth, and a worker ran it; the parent's step lists it.
    const child = await stored(childId);
    expect(child.record).toMatchObject({ parentRunId: rootId, rootRunId: rootId, parentStepKey: '0', depth: 1 });
    expect(child.status.state).toBe('completed');
    expect(workers.map((w) => w.id())).toContain(child.worker);
    expect(await admin.sismember(keys.active, childId)).toBe(0);
    expect(fin.steps[0].children).toEqual([childId]);
    expect(fin.fanout.used).toBe(2);
    // The root's session sees its tree: the nested run's status and output through the top-level server.
    const cs = await s.call('status', { runId: childId });
    expect(cs.isError, textOf(cs)).toBeFalsy();
    expect(sc(cs).state).toBe('completed');
    expect(sc(cs).output.text).toBe('from the nested run');
    // Listed with the session's runs, as a nested run (not an adopted one), as in local mode.
    const listed = (sc(await s.call('status', {})).runs as Array<{ runId: string; adopted: boolean }>).find((r) => r.runId === childId);
    expect(listed?.adopted).toBe(false);

    // Nowhere in what the workers and the server logged, nor in the runs' events and statuses in Redis.
    for (const w of workers) expect(w.log()).not.toContain(secret);
    expect(s.stderr()).not.toContain(secret);
    for (const id of [rootId, childId]) {
      expect(JSON.stringify(await admin.hgetall(keys.run(id)))).not.toContain(secret);
      expect((await admin.lrange(keys.events(id), 0, -1)).join('\n')).not.toContain(secret);
    }
    // Nor in the runners' logs, events, statuses or step output on the workers.
    for (const w of workers) {
      for (const d of fs.readdirSync(path.join(w.home, 'runs')).filter((n) => n.startsWith('r-'))) {
        const dir = path.join(w.home, 'runs', d);
        const files = ['runner.log', 'events.jsonl', 'status.json', 'run.json', ...(fs.existsSync(path.join(dir, 'out')) ? fs.readdirSync(path.join(dir, 'out')).map((f) => path.join('out', f)) : [])];
        for (const f of files) {
          const text = fs.existsSync(path.join(dir, f)) ? fs.readFileSync(path.join(dir, f), 'utf8') : '';
          expect(text, `${d}/${f}`).not.toContain(secret);
        }
      }
    }
    // Nor left on the workers' disks once the runs ended: the run's link file goes with its end.
    for (const w of workers) {
      const found = fs.readdirSync(path.join(w.home, 'runs')).filter((d) => fs.existsSync(path.join(w.home, 'runs', d, 'distributed-link.json')));
      expect(found).toEqual([]);
    }
    // Every slot and agent slot is back.
    await until(async () => (await admin.scard(keys.active)) === 0 && Number((await admin.get(keys.agentsTotal)) ?? 0) === 0, 20_000, 'every slot returned');
  }, 150_000);

  it('a tree three levels deep: a nested run on a worker delegates again, through the same Redis, one level deeper', async () => {
    const s = await server();
    const inner = { launches: [{ agent: 'echo', task: 'from the grandchild' }], wait: true };
    const plan = { launches: [{ agent: 'delegate', task: JSON.stringify(inner) }], wait: true };
    const fin = await waitTerminal(s, sc(await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) })).runId, 120_000);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    // Whole reports (status inlines a bounded head and tail): the output resources, from Redis.
    const outputOf = async (runId: string) => ((await s.client.readResource({ uri: `subagents://runs/${runId}/output` })).contents[0] as { text: string }).text;
    const rep = JSON.parse(await outputOf(fin.runId)) as { results: Array<{ isError: boolean; text: string; structured: any }> };
    expect(rep.results[0]!.isError, rep.results[0]!.text).toBe(false);
    const childId = rep.results[0]!.structured.runId as string;
    const child = await waitTerminal(s, childId, 30_000);
    expect(child.state).toBe('completed');
    const childRep = JSON.parse(await outputOf(childId)) as { results: Array<{ isError: boolean; text: string; structured: any }>; finals: any[] };
    expect(childRep.results[0]!.isError, childRep.results[0]!.text).toBe(false);
    const grandId = childRep.results[0]!.structured.runId as string;
    expect(childRep.finals[0].output.text).toBe('from the grandchild');
    expect(child.steps[0].children).toEqual([grandId]);
    expect(fin.steps[0].children).toEqual([childId]);
    const grand = await stored(grandId);
    expect(grand.record).toMatchObject({ parentRunId: childId, rootRunId: fin.runId, depth: 2 });
    // One budget for the whole tree: three agents started, claimed from the root's.
    expect(Number(await admin.get(keys.fanout(fin.runId)))).toBe(3);
    expect(fin.fanout.used).toBe(3);
    // The root's session sees the grandchild too (nested under its own run).
    expect(sc(await s.call('status', { runId: grandId })).state).toBe('completed');
    await until(async () => (await admin.scard(keys.active)) === 0 && Number((await admin.get(keys.agentsTotal)) ?? 0) === 0, 20_000, 'every slot returned');
  }, 180_000);

  it('the tree\'s fan-out budget and depth limit are enforced in Redis and refuse the nested launch with their codes', async () => {
    // Root 1 + two nested launches of 1 each at once, in a budget of 2: exactly one is admitted.
    const s = await server({ SUBAGENTS_MAX_SPAWNS_PER_RUN: '2' });
    const plan = { launches: [{ agent: 'echo', task: 'a' }, { agent: 'echo', task: 'b' }], wait: true };
    const fin = await waitTerminal(s, sc(await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) })).runId, 90_000);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const rep = JSON.parse(fin.output.text) as { results: Array<{ isError: boolean; text: string; structured: any }> };
    const refused = rep.results.filter((r) => r.isError);
    expect(refused, JSON.stringify(rep.results)).toHaveLength(1);
    expect(refused[0]!.text).toMatch(/^FANOUT_EXHAUSTED/);
    expect(refused[0]!.text).toContain('SUBAGENTS_MAX_SPAWNS_PER_RUN');
    expect(fin.steps[0].children).toHaveLength(1);
    expect(Number(await admin.get(keys.fanout(fin.runId)))).toBe(2);

    // A tree limited to depth 1: its agent (depth 1) may not delegate at all.
    const shallow = await server({ SUBAGENTS_MAX_DEPTH: '1' });
    const one = { launches: [{ agent: 'echo', task: 'too deep' }] };
    const fin2 = await waitTerminal(shallow, sc(await shallow.call('launch', { agent: 'delegate', task: JSON.stringify(one) })).runId, 90_000);
    const rep2 = JSON.parse(fin2.output.text) as { results: Array<{ isError: boolean; text: string }> };
    expect(rep2.results[0]!.isError).toBe(true);
    expect(rep2.results[0]!.text).toMatch(/^DEPTH_EXCEEDED/);
    expect(fin2.steps[0].children).toEqual([]);
  }, 150_000);

  it('a nested run still active when its launching agent exits ends PARENT_ENDED on its worker, before the parent run ends', async () => {
    const s = await server();
    const results = path.join(t.base, 'results-3');
    const hold = path.join(t.base, 'hold-3');
    const plan = { launches: [{ agent: 'sleeper', task: 'outlive my parent' }], resultsFile: results, holdFile: hold };
    const rootId = sc(await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) })).runId as string;
    const launched = await resultsOf(results);
    expect(launched[0]!.isError, launched[0]!.text).toBe(false);
    const childId = launched[0]!.structured.runId as string;
    // The nested run is running on a worker (its agent has a pid there) before its parent's agent exits.
    let agentPid = 0;
    await until(async () => {
      const st = sc(await s.call('status', { runId: childId }));
      agentPid = st.steps[0]?.pid ?? 0;
      return st.state === 'running' && agentPid > 0;
    }, 60_000, 'the nested run running on a worker');
    fs.writeFileSync(hold, '');
    const child = await waitTerminal(s, childId, 60_000);
    expect(child.state).toBe('cancelled');
    expect(child.error.code).toBe('PARENT_ENDED');
    const root = await waitTerminal(s, rootId, 60_000);
    expect(root.state).toBe('completed');
    // The launching step, and so the parent run, ended only once its nested run had (a root holds its slot for its
    // whole tree), as a local step waits for its nested runs.
    expect(Date.parse(root.steps[0].endedAt)).toBeGreaterThanOrEqual(Date.parse(child.endedAt));
    expect(Date.parse(root.endedAt)).toBeGreaterThanOrEqual(Date.parse(child.endedAt));
    await until(() => !readProc(agentPid, 'cmdline').includes('60000'), 30_000, 'the nested run\'s agent gone');
  }, 150_000);

  it('cancel of the root cascades to its nested runs wherever they run, and their agents stop', async () => {
    const s = await server();
    const results = path.join(t.base, 'results-4');
    const plan = { launches: [{ agent: 'sleeper', task: 'cancel me with my root' }], resultsFile: results, holdFile: path.join(t.base, 'never') };
    const rootId = sc(await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) })).runId as string;
    const launched = await resultsOf(results);
    expect(launched[0]!.isError, launched[0]!.text).toBe(false);
    const childId = launched[0]!.structured.runId as string;
    let agentPid = 0;
    await until(async () => {
      const st = sc(await s.call('status', { runId: childId }));
      agentPid = st.steps[0]?.pid ?? 0;
      return st.state === 'running' && agentPid > 0;
    }, 60_000, 'the nested run running on a worker');
    const c = await s.call('cancel', { runId: rootId });
    expect(c.isError, textOf(c)).toBeFalsy();
    expect(sc(c).state).toBe('cancelled');
    const child = await waitTerminal(s, childId, 60_000);
    // As in local mode, a cancel of the tree cancels each run of it (docs/contract.md, "cancel").
    expect(child.state).toBe('cancelled');
    expect(child.error.code).toBe('CANCELLED');
    await until(() => !readProc(agentPid, 'cmdline').includes('60000'), 30_000, 'the nested run\'s agent gone');
    await until(async () => (await admin.scard(keys.active)) === 0 && Number((await admin.get(keys.agentsTotal)) ?? 0) === 0, 30_000, 'every slot returned');
  }, 150_000);

  it('a nested run no worker has taken yet (every place busy) is removed from the queue and ends PARENT_ENDED when its parent\'s agent exits', async () => {
    // A pool of one place: the parent holds it, so its nested run's job waits in the queue.
    await startWorker('tight', { pool: 'tight', concurrency: 1 });
    const s = await server({ SUBAGENTS_POOL: 'tight' });
    const results = path.join(t.base, 'results-tight');
    const hold = path.join(t.base, 'hold-tight');
    const plan = { launches: [{ agent: 'echo', task: 'never started' }], resultsFile: results, holdFile: hold };
    const rootId = sc(await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) })).runId as string;
    const launched = await resultsOf(results);
    expect(launched[0]!.isError, launched[0]!.text).toBe(false);
    const childId = launched[0]!.structured.runId as string;
    expect(sc(await s.call('status', { runId: childId })).state).toBe('starting');
    expect(await admin.exists(`bull:subagents-tight:${childId}`)).toBe(1);
    fs.writeFileSync(hold, '');
    const child = await waitTerminal(s, childId, 60_000);
    expect(child.state).toBe('cancelled');
    expect(child.error.code).toBe('PARENT_ENDED');
    expect(child.steps[0].pid).toBeNull();
    expect((await waitTerminal(s, rootId, 60_000)).state).toBe('completed');
    // Its job is gone: the freed place never runs it.
    expect(await admin.exists(`bull:subagents-tight:${childId}`)).toBe(0);
    expect((await stored(childId)).worker).toBeNull();
  }, 150_000);

  it('a parent whose worker is SIGKILLed ends RUNNER_LOST, and its nested run on the other worker ends PARENT_ENDED', async () => {
    // A pool of its own, two workers of one place each: the parent takes one, its nested run must take the other.
    const x = await startWorker('lost-x', { pool: 'lost', concurrency: 1, stallMs: '3000' });
    const y = await startWorker('lost-y', { pool: 'lost', concurrency: 1, stallMs: '3000' });
    const s = await server({ SUBAGENTS_POOL: 'lost', SUBAGENTS_STALL_INTERVAL_MS: '3000' });
    const results = path.join(t.base, 'results-lost');
    const plan = { launches: [{ agent: 'sleeper', task: 'lose my parent' }], resultsFile: results, holdFile: path.join(t.base, 'never') };
    const rootId = sc(await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) })).runId as string;
    const launched = await resultsOf(results);
    expect(launched[0]!.isError, launched[0]!.text).toBe(false);
    const childId = launched[0]!.structured.runId as string;
    let agentPid = 0;
    await until(async () => {
      const st = sc(await s.call('status', { runId: childId }));
      agentPid = st.steps[0]?.pid ?? 0;
      return st.state === 'running' && agentPid > 0;
    }, 60_000, 'the nested run running on the other worker');
    const holder = (await stored(rootId)).worker;
    expect((await stored(childId)).worker).not.toBe(holder);
    const dead = [x, y].find((w) => w.id() === holder)!;
    const exited = new Promise((r) => dead.child.once('exit', r));
    dead.child.kill('SIGKILL');
    await exited;
    const root = await waitTerminal(s, rootId, 60_000);
    expect(root.state).toBe('failed');
    expect(root.error.code).toBe('RUNNER_LOST');
    const child = await waitTerminal(s, childId, 60_000);
    expect(child.state).toBe('cancelled');
    expect(child.error.code).toBe('PARENT_ENDED');
    await until(() => !readProc(agentPid, 'cmdline').includes('60000'), 30_000, 'the nested run\'s agent gone');
  }, 180_000);
});

suite('nested launches are counted exactly in Redis (Lua), whichever server sends them', () => {
  it('two clients racing 100 times for the tree\'s last fan-out claim (and 50 for the last agent slot): exactly one wins each time', async () => {
    // Two connections stand in for two nested servers on two workers: the script runs alone in Redis.
    const a = new RedisRuns(connect(url, { blocking: true }));
    const b = new RedisRuns(connect(url, { blocking: true }));
    const parent = 'r-raceparent';
    const record = (runId: string, maxSpawns: number) => nestedRecord(runId, parent, maxSpawns);
    const status = startingStatus;
    const admitted: string[] = [];
    try {
      await admin.hset(keys.run(parent), 'state', 'running');
      for (let i = 0; i < 100; i++) {
        await admin.set(keys.fanout(parent), 4);
        const ids = [`r-nrace${i}a`, `r-nrace${i}b`];
        const results = await Promise.all([a.claimNested(record(ids[0]!, 5), status(ids[0]!), 's-root', { maxAgents: 64 }), b.claimNested(record(ids[1]!, 5), status(ids[1]!), 's-root', { maxAgents: 64 })]);
        expect(results.map((r) => r.outcome).sort()).toEqual(['ADMITTED', 'FANOUT']);
        expect(await admin.get(keys.fanout(parent))).toBe('5');
        // Ended at once: its agent slot comes back (the budget's claim stays, as a started agent's does).
        const won = ids[results[0]!.outcome === 'ADMITTED' ? 0 : 1]!;
        admitted.push(won);
        const run = await a.read(won);
        await a.endRun({ ...run!.status, state: 'cancelled', endedAt: new Date().toISOString() });
      }
      // Agent slots: the pool's last one, with budget to spare.
      const before = Number((await admin.get(keys.agentsTotal)) ?? 0);
      for (let i = 0; i < 50; i++) {
        const ids = [`r-nslot${i}a`, `r-nslot${i}b`];
        const results = await Promise.all([a.claimNested(record(ids[0]!, 1000), status(ids[0]!), 's-root', { maxAgents: before + 1 }), b.claimNested(record(ids[1]!, 1000), status(ids[1]!), 's-root', { maxAgents: before + 1 })]);
        expect(results.map((r) => r.outcome).sort()).toEqual(['ADMITTED', 'AGENTS']);
        const won = ids[results[0]!.outcome === 'ADMITTED' ? 0 : 1]!;
        expect(Number(await admin.get(keys.agentsTotal))).toBe(before + 1);
        const run = await a.read(won);
        await a.endRun({ ...run!.status, state: 'cancelled', endedAt: new Date().toISOString() });
        expect(Number(await admin.get(keys.agentsTotal))).toBe(before);
      }
      // A parent that has ended takes no more nested runs.
      await admin.hset(keys.run(parent), 'state', 'completed');
      expect((await a.claimNested(record('r-nrace-late', 1000), status('r-nrace-late'), 's-root', { maxAgents: 1000 })).outcome).toBe('PARENT_ENDED');
      expect(Object.keys(await admin.hgetall(keys.children(parent))).length).toBe(150);
    } finally {
      await endAdmitted(admitted, a, b);
    }
  }, 60_000);

  it('an append\'s claim and a nested launch\'s claim racing 100 times for the tree\'s last unit: exactly one wins each time', async () => {
    const a = new RedisRuns(connect(url, { blocking: true }));
    const b = new RedisRuns(connect(url, { blocking: true }));
    const root = 'r-appendraceroot';
    const admitted: string[] = [];
    try {
      await admin.hset(keys.run(root), 'state', 'running');
      for (let i = 0; i < 100; i++) {
        await admin.set(keys.fanout(root), 4);
        const id = `r-arace${i}`;
        const rec = nestedRecord(id, root, 5);
        const st = startingStatus(id);
        // Alternating which is sent first.
        const ap = () => a.claimAppend(root, 1, 5);
        const ne = () => b.claimNested(rec, st, 's-root', { maxAgents: 1000 });
        let claim: { claimed: boolean; used: number };
        let nested: { outcome: string };
        if (i % 2 === 0) [claim, nested] = await Promise.all([ap(), ne()]);
        else [nested, claim] = await Promise.all([ne(), ap()]);
        const nestedWon = nested.outcome === 'ADMITTED';
        expect([claim.claimed, nestedWon].filter(Boolean)).toHaveLength(1);
        expect(await admin.get(keys.fanout(root))).toBe('5');
        if (nestedWon) admitted.push(id);
        // An append refused leaves the count as it was; a claim returned comes off it, never below zero.
        expect(await a.claimAppend(root, 1, 5)).toEqual({ claimed: false, used: 5 });
      }
      await a.returnFanout(root, 2);
      expect(await admin.get(keys.fanout(root))).toBe('3');
      await a.returnFanout(root, 10);
      expect(await admin.get(keys.fanout(root))).toBe('0');
    } finally {
      await endAdmitted(admitted, a, b);
    }
  }, 60_000);

  it('an append to a chain on a worker is claimed in Redis with the nested runs\' claims: refused FANOUT_EXHAUSTED over budget, and one winner for the last unit against a nested launch', async () => {
    // Budget 40: the chain's step claims 1; a nested launch of its tree (the script a nested server runs) claims 38.
    const s = await server({ SUBAGENTS_MAX_SPAWNS_PER_RUN: '40' });
    const runId = sc(await s.call('launch', { chain: [{ agent: 'sleeper', task: 'hold' }] })).runId as string;
    await until(async () => { const v = sc(await s.call('status', { runId })); return v.state === 'running' && !!v.steps[0].pid; }, 60_000, 'the chain running on a worker');
    const nested = new RedisRuns(connect(url, { blocking: true }));
    const nestedIds: string[] = [];
    const claimNested = async (id: string, claims = 1) => {
      const c = await nested.claimNested(nestedRecord(id, runId, 40, 'default', claims), startingStatus(id), 's-root', { maxAgents: 1000 });
      if (c.outcome === 'ADMITTED') nestedIds.push(id);
      return c;
    };
    try {
      expect((await claimNested('r-appendnest0', 38)).outcome).toBe('ADMITTED');
      // 39 of 40 used: a parallel append of 2 no longer fits, though the worker's own tree counts only 1.
      const big = await s.call('append', { runId, step: { parallel: [{ agent: 'echo', task: '1' }, { agent: 'echo', task: '2' }] } });
      expect(textOf(big)).toMatch(/^FANOUT_EXHAUSTED: the run tree's fan-out budget has 1 of 40 agent starts left and this step needs 2; /);
      expect(Number(await admin.get(keys.fanout(runId)))).toBe(39);
      expect(sc(await s.call('status', { runId })).pendingAppends).toBe(0);

      // The last unit, 30 times: an append and a nested launch at once; exactly one wins, the count never passes 40
      // (set back to 39 each time; the worker's own tree, 1 + the appends won, stays under 40 and never decides).
      // The nested claim is sent from 0 to 90 ms after the append (whose round trip through the worker is longer),
      // so either may reach Redis first; which one wins is not asserted, only that one does.
      let appendsWon = 0;
      for (let i = 0; i < 30; i++) {
        await admin.set(keys.fanout(runId), 39);
        const [ap, ne] = await Promise.all([
          s.call('append', { runId, step: { agent: 'echo', task: `race ${i}` } }),
          new Promise((r) => setTimeout(r, (i % 10) * 10)).then(() => claimNested(`r-appendnest${i + 1}`)),
        ]);
        const appendWon = !ap.isError;
        if (!appendWon) expect(textOf(ap)).toMatch(/^FANOUT_EXHAUSTED: the run tree's fan-out budget has 0 of 40 /);
        expect([appendWon, ne.outcome === 'ADMITTED'].filter(Boolean), `${textOf(ap)} / ${ne.outcome}`).toHaveLength(1);
        expect(Number(await admin.get(keys.fanout(runId)))).toBe(40);
        if (appendWon) appendsWon++;
      }
      // One more with the unit free and nothing racing it: accepted, so at least one append is pending.
      await admin.set(keys.fanout(runId), 39);
      const last = await s.call('append', { runId, step: { agent: 'echo', task: 'last' } });
      expect(last.isError, textOf(last)).toBeFalsy();
      expect(sc(last).fanout).toEqual({ used: 40, limit: 40, remaining: 0 });
      const pending = appendsWon + 1;
      expect(sc(await s.call('status', { runId })).pendingAppends).toBe(pending);

      // Cancelled, its appended steps never start: their claims go back to the tree's count at its end, as a local
      // run's end gives them back (the count is read after the end, which the same script records).
      await s.call('cancel', { runId });
      const fin = await waitTerminal(s, runId, 60_000);
      expect(fin.state).toBe('cancelled');
      expect(fin.steps.filter((x: { state: string }) => x.state === 'skipped')).toHaveLength(pending);
      expect(Number(await admin.get(keys.fanout(runId)))).toBe(40 - pending);
    } finally {
      await endAdmitted(nestedIds, nested);
      await s.call('cancel', { runId });
    }
  }, 180_000);
});
