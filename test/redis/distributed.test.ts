/**
 * Distributed mode end to end (docs/scale-out.md): one private redis-server for the file, real MCP servers pointed at
 * it, and real `subagents-mcp worker` processes, each with its own temp state home standing in for a machine, running
 * the fake agents of test/fixtures. Every wait is bounded and waits for a condition, never for a time.
 */
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { connect } from '../../src/store/redis/connection.js';
import { keys } from '../../src/store/redis/keys.js';
import { RedisRuns } from '../../src/store/redis/run-store.js';
import type { ScriptedRedis } from '../../src/store/redis/scripts.js';
import { MAIN_JS, FIXTURE_AGENTS } from '../helpers/paths.js';
import { REDIS_SERVER, startRedis, type RedisInstance } from '../helpers/redis-server.js';
import { skipWithout } from '../helpers/system-tools.js';

const skipped = skipWithout('redis-server', REDIS_SERVER !== null);
const suite = skipped ? describe.skip : describe;
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import os from 'node:os';
import { pidsMentioning } from '../e2e/support.js';
import { stopWorker, until, type WorkerProc } from '../helpers/redis-fleet.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
/**
 * Workers' stall interval (their job lock's duration): long enough that a loaded CI machine never misses a lock
 * renewal; the dead-worker test gives its two workers a short one to see RUNNER_LOST quickly.
 */
const STALL_MS = 10_000;
const SHORT_STALL_MS = '2000';

let redis: RedisInstance;
let t: ReturnType<typeof tempStateHome>;
const workers: WorkerProc[] = [];
const servers: Started[] = [];
let serverCount = 0;

function agentsFor(home: string): void {
  const dir = path.join(home, 'agents');
  writeAgent(dir, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
  writeAgent(dir, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
  // Long enough that a status poll sees it running on a loaded machine (a worker's mirror publishes the state).
  writeAgent(dir, 'nap', { backend: 'command', command: ['node', FAKE, 'sleep', '3000'] });
}

/** Starts a worker; resolved once it has said it is up, or at once with `waitUp: false` (a Redis that is not up yet). */
async function startWorker(name: string, o: { roots?: string[]; concurrency?: number; args?: string[]; env?: Record<string, string>; waitUp?: boolean } = {}): Promise<WorkerProc> {
  const home = path.join(t.base, `worker-${name}`);
  fs.mkdirSync(home, { mode: 0o700 });
  agentsFor(home);
  let out = '';
  const args = [MAIN_JS, 'worker', '--redis', redis.url, '--home', home, '--concurrency', String(o.concurrency ?? 2)];
  for (const r of o.roots ?? [t.root]) args.push('--root', r);
  args.push(...(o.args ?? []));
  const child = spawn(process.execPath, args, {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, SUBAGENTS_STALL_INTERVAL_MS: String(STALL_MS), SUBAGENTS_KILL_GRACE_MS: '1000', ...o.env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  child.stderr!.on('data', (c: Buffer) => { out += c.toString(); });
  const w: WorkerProc = { child, home, log: () => out, id: () => /worker (w-[\w-]+) on/.exec(out)?.[1] ?? null };
  workers.push(w);
  if (o.waitUp === false) return w;
  await until(() => w.id() !== null || child.exitCode !== null, 30_000, 'the worker\'s start');
  if (!w.id()) throw new Error(`worker did not start: ${out}`);
  return w;
}

async function server(extra: Record<string, string> = {}): Promise<Started> {
  const home = path.join(t.base, `server-${serverCount++}`);
  fs.mkdirSync(home, { mode: 0o700 });
  const s = await startServer({ SUBAGENTS_HOME: home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_REDIS_URL: redis.url, SUBAGENTS_STALL_INTERVAL_MS: String(STALL_MS), ...extra });
  servers.push(s);
  return s;
}

/** The first server (default limits), started by whichever test needs it first. */
async function mainServer(): Promise<Started> {
  return servers[0] ?? server();
}

async function waitState(s: Started, runId: string, want: (state: string) => boolean, maxMs = 30_000): Promise<Record<string, any>> {
  const end = Date.now() + maxMs;
  for (;;) {
    const r = await s.call('status', { runId, waitMs: 5000 });
    if (r.isError) throw new Error(textOf(r));
    if (want(sc(r).state)) return sc(r);
    if (Date.now() > end) throw new Error(`run ${runId} still ${sc(r).state}`);
  }
}

beforeAll(async () => {
  if (skipped) return;
  redis = await startRedis();
  t = tempStateHome('sa-redis-');
}, 30_000);

afterAll(async () => {
  for (const s of servers) await s.close();
  for (const w of workers) await stopWorker(w, 'SIGKILL');
  await redis?.stop();
  t?.cleanup();
}, 30_000);

suite('capacity is exact across servers (Lua in Redis)', () => {
  it('two Redis clients racing 200 times for the last active-run slot (and 50 for the last agent slot): exactly one wins each time', async () => {
    // Two connections stand in for two servers: the script runs alone in Redis whichever connection sends it.
    const a = new RedisRuns(connect(redis.url, { blocking: true }));
    const b = new RedisRuns(connect(redis.url, { blocking: true }));
    const record = (runId: string) => ({ v: 1 as const, runId, sessionId: 's-race', pool: 'race', mode: 'single' as const, cwd: '/', label: null, createdAt: new Date().toISOString(), agents: ['echo'], limits: { maxSpawns: 64, maxDepth: 3 }, claims: 1, agentSlots: 1 });
    const status = (runId: string, state: 'starting' | 'queued') => ({ v: 1 as const, runId, state, error: null, startedAt: null, endedAt: null, updatedAt: new Date().toISOString(), runner: null, steps: [], appendsTaken: 0, survivors: [] });
    try {
      for (let i = 0; i < 200; i++) {
        await (a.redis as ScriptedRedis).del(keys.active, keys.queued);
        await a.redis.sadd(keys.active, 'r-holder1', 'r-holder2');
        const ids = [`r-race${i}a`, `r-race${i}b`];
        const results = await Promise.all([
          a.claimLaunch(record(ids[0]!), status(ids[0]!, 'starting'), status(ids[0]!, 'queued'), { limit: 3, queueAllowed: false, maxQueued: 0 }),
          b.claimLaunch(record(ids[1]!), status(ids[1]!, 'starting'), status(ids[1]!, 'queued'), { limit: 3, queueAllowed: false, maxQueued: 0 }),
        ]);
        expect(results.map((r) => r.outcome).sort()).toEqual(['ADMITTED', 'FULL']);
        expect(await a.redis.scard(keys.active)).toBe(3);
      }
      // Agent slots: two workers racing for the last one; exactly one starts.
      for (let i = 0; i < 50; i++) {
        await a.redis.del(keys.active, keys.queued, keys.agents, keys.agentsTotal);
        const ids = [`r-slot${i}a`, `r-slot${i}b`];
        for (const id of ids) {
          await a.claimLaunch(record(id), status(id, 'starting'), status(id, 'queued'), { limit: 0, queueAllowed: false, maxQueued: 0 });
        }
        const started = await Promise.all([a.startRun(ids[0]!, 0, 1, 1), b.startRun(ids[1]!, 0, 1, 1)]);
        expect(started.sort()).toEqual([0, 1]);
        expect(await a.redis.get(keys.agentsTotal)).toBe('1');
      }
    } finally {
      await a.redis.del(keys.active, keys.queued, keys.agents, keys.agentsTotal);
      a.redis.disconnect();
      b.redis.disconnect();
    }
  }, 60_000);

  it('two real servers launching at once into the last slot 200 times: each time one is accepted, the other refused CAPACITY_EXHAUSTED', async () => {
    const one = await server({ SUBAGENTS_MAX_ACTIVE_RUNS: '1' });
    const two = await server({ SUBAGENTS_MAX_ACTIVE_RUNS: '1' });
    for (let i = 0; i < 200; i++) {
      // No worker runs yet: the winner holds the slot (starting) until it is cancelled.
      const answers = await Promise.all([one, two].map((s) => s.call('launch', { agent: 'echo', task: String(i), queue: false })));
      const won = answers.filter((r) => !r.isError);
      const lost = answers.filter((r) => r.isError);
      expect(won).toHaveLength(1);
      expect(lost).toHaveLength(1);
      expect(textOf(lost[0]!)).toMatch(/^CAPACITY_EXHAUSTED/);
      const winner = won[0]!;
      const by = answers[0] === winner ? one : two;
      expect(sc(await by.call('cancel', { runId: sc(winner).runId })).state).toBe('cancelled');
    }
    await one.close();
    await two.close();
    servers.splice(servers.indexOf(one), 1);
    servers.splice(servers.indexOf(two), 1);
  }, 300_000);
});

suite('launch → worker → completed through a real MCP server', () => {
  it('runs on a worker, status waitMs wakes on the run\'s channel, and output comes from Redis', async () => {
    await startWorker('a');
    const s = await server();
    const r = await s.call('launch', { agent: 'echo', task: 'hello over redis' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const runId = sc(r).runId as string;
    expect(['starting', 'queued']).toContain(sc(r).state);
    const fin = await waitTerminal(s, runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('hello over redis');
    expect(fin.steps[0].output.text).toBe('hello over redis');
    expect(fin.steps[0].exitCode).toBe(0);
    // The step's evidence names the worker's host; the run is recorded with its worker.
    const c = connect(redis.url, { blocking: true });
    try {
      const stored = JSON.parse((await c.hget(keys.run(runId), 'status'))!);
      expect(stored.steps[0].process.host).toBe(os.hostname());
      expect(await c.hget(keys.run(runId), 'worker')).toBe(workers[0]!.id());
    } finally {
      c.disconnect();
    }
    // The MCP resources serve the same output from Redis.
    const res = await s.client.readResource({ uri: `subagents://runs/${runId}/output` });
    expect((res.contents[0] as { text: string }).text).toBe('hello over redis');
    const step = await s.client.readResource({ uri: `subagents://runs/${runId}/steps/0/output` });
    expect((step.contents[0] as { text: string }).text).toBe('hello over redis');
    const events = await s.client.readResource({ uri: `subagents://runs/${runId}/events` });
    expect((events.contents[0] as { text: string }).text.split('\n').filter(Boolean).map((l) => JSON.parse(l).type)).toEqual(expect.arrayContaining(['accepted', 'started', 'ended']));
    const whole = JSON.parse((await s.client.readResource({ uri: `subagents://runs/${runId}` })).contents[0]!.text as string);
    expect(whole.state).toBe('completed');
    // The session's list comes from Redis too.
    const list = sc(await s.call('status', {}));
    expect(list.runs.map((x: { runId: string }) => x.runId)).toContain(runId);
  }, 90_000);

  it('doctor reports Redis reachable, its version, persistence and the workers seen, never the password', async () => {
    const home = path.join(t.base, 'doctor-home');
    const withPassword = redis.url.replace('redis://', 'redis://someone:pw-never-shown@');
    // Redis without ACL users accepts any AUTH username only as "default": doctor's connection must still work, so the
    // plain URL is used for the JSON check and the password form only for what is printed.
    const run = (url: string) => new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
      const c = spawn(process.execPath, [MAIN_JS, 'doctor', '--json', '--home', home, '--redis', url], { env: { PATH: process.env.PATH, HOME: process.env.HOME }, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = ''; let err = '';
      c.stdout!.on('data', (d: Buffer) => { out += d; });
      c.stderr!.on('data', (d: Buffer) => { err += d; });
      c.on('exit', (code) => resolve({ code, out, err }));
    });
    const ok = await run(redis.url);
    const report = JSON.parse(ok.out);
    expect(report.distributed.reachable).toBe(true);
    expect(report.distributed.version).toMatch(/^\d+\.\d+/);
    expect(report.distributed.persistence.aof).toBe(true);
    expect(report.distributed.workers.map((w: { id: string }) => w.id)).toContain(workers[0]!.id());
    const hidden = await run(withPassword);
    expect(hidden.out + hidden.err).not.toContain('pw-never-shown');
    expect(hidden.out).toContain(`redis://127.0.0.1:${redis.port}`);
  }, 60_000);

  it('a status wait wakes when the run ends (published), well before its waitMs', async () => {
    const s = await mainServer();
    const r = await s.call('launch', { agent: 'nap', task: 'x' });
    const runId = sc(r).runId as string;
    // The wait starts at once, while the run is queued or running (its agent naps 3 s): a look for the running state
    // first could miss that window on a loaded machine, between two of its polls.
    const w = await s.call('status', { runId, waitMs: 40_000, until: 'terminal' });
    expect(sc(w).state).toBe('completed');
    expect(sc(w).changed).toBe(true);
    expect(sc(w).waitedMs).toBeLessThan(40_000);
  }, 90_000);

  it('cancel of a running run stops its agent on the worker', async () => {
    const s = await mainServer();
    const r = await s.call('launch', { agent: 'sleeper', task: 'forever' });
    const runId = sc(r).runId as string;
    const running = await waitState(s, runId, (st) => st === 'running');
    await until(async () => {
      const v = sc(await s.call('status', { runId }));
      return v.steps[0].pid > 0;
    }, 20_000);
    const pid = sc(await s.call('status', { runId })).steps[0].pid as number;
    void running;
    const c = await s.call('cancel', { runId });
    expect(c.isError, textOf(c)).toBeFalsy();
    const fin = await waitTerminal(s, runId, 30_000);
    expect(fin.state).toBe('cancelled');
    // Gone or a zombie; a process that exits between two looks is gone (its stat file then cannot be read).
    const gone = () => { try { return /\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return true; } };
    await until(gone, 30_000, 'the cancelled agent gone');
  }, 90_000);

  it('a run whose cwd is outside the worker\'s roots ends failed naming the worker and the path', async () => {
    const s = await mainServer();
    const elsewhere = path.join(t.root, 'elsewhere');
    fs.mkdirSync(elsewhere, { recursive: true });
    const w2 = await startWorker('narrow', { roots: [path.join(t.root, 'narrow-only')] });
    await stopWorker(workers[0]!); // only the narrow worker takes jobs now
    const r = await s.call('launch', { agent: 'echo', task: 'x', cwd: elsewhere });
    const fin = await waitTerminal(s, sc(r).runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.message).toContain(w2.id()!);
    expect(fin.error.message).toContain(elsewhere);
    await stopWorker(w2);
  }, 90_000);
});

suite('queue, load sharing and faults', () => {
  it('cancel of a queued run removes it before any worker takes it', async () => {
    const s = await server({ SUBAGENTS_MAX_ACTIVE_RUNS: '1' });
    // No worker is running: the first run holds the slot (starting), the second waits in the queue.
    const first = sc(await s.call('launch', { agent: 'echo', task: 'one' }));
    const second = sc(await s.call('launch', { agent: 'echo', task: 'two' }));
    expect(first.state).toBe('starting');
    expect(second.state).toBe('queued');
    expect(second.queue).toEqual({ position: 1, length: 1 });
    const c = sc(await s.call('cancel', { runId: second.runId }));
    expect(c.state).toBe('cancelled');
    const c1 = sc(await s.call('cancel', { runId: first.runId }));
    expect(c1.state).toBe('cancelled');
    // A worker started now finds nothing to run of them.
    const w = await startWorker('late');
    const again = sc(await s.call('status', { runId: second.runId }));
    expect(again.state).toBe('cancelled');
    await stopWorker(w);
  }, 90_000);

  it('two workers share the load', async () => {
    const a = await startWorker('share-a', { concurrency: 2 });
    const b = await startWorker('share-b', { concurrency: 2 });
    const s = await mainServer();
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(sc(await s.call('launch', { agent: 'sleeper', task: String(i) })).runId);
    const c = connect(redis.url, { blocking: true });
    try {
      await until(async () => {
        const owners = await Promise.all(ids.map((id) => c.hget(keys.run(id), 'worker')));
        return owners.every(Boolean);
      }, 30_000);
      const owners = await Promise.all(ids.map((id) => c.hget(keys.run(id), 'worker')));
      expect(new Set(owners)).toEqual(new Set([a.id(), b.id()]));
    } finally {
      c.disconnect();
    }
    for (const id of ids) await s.call('cancel', { runId: id });
    for (const id of ids) expect((await waitTerminal(s, id, 30_000)).state).toBe('cancelled');
    await stopWorker(a);
    await stopWorker(b);
  }, 120_000);

  it('SIGKILL of a worker mid-step: RUNNER_LOST within the stall interval, its agents gone, never run twice', async () => {
    const doomed = await startWorker('doomed', { concurrency: 1, env: { SUBAGENTS_STALL_INTERVAL_MS: SHORT_STALL_MS } });
    const s = await mainServer();
    const runId = sc(await s.call('launch', { agent: 'sleeper', task: 'doomed' })).runId as string;
    await waitState(s, runId, (st) => st === 'running');
    await until(async () => sc(await s.call('status', { runId })).steps[0].pid > 0, 20_000);
    const agentPid = sc(await s.call('status', { runId })).steps[0].pid as number;
    const runnerPids = pidsMentioning(doomed.home).filter((p) => p !== doomed.child.pid);
    expect(runnerPids.length).toBeGreaterThan(0);
    const survivor = await startWorker('survivor', { concurrency: 1, env: { SUBAGENTS_STALL_INTERVAL_MS: SHORT_STALL_MS } });
    await stopWorker(doomed, 'SIGKILL');
    const fin = await waitTerminal(s, runId, 60_000);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('RUNNER_LOST');
    // The runner saw its worker die, stopped its agent and exited.
    const gone = (pid: number) => { try { return /\) Z /.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8')); } catch { return true; } };
    await until(() => gone(agentPid), 20_000, 'the dead worker\'s agent gone');
    // Its idle warm runners too: they retire when their worker dies (runner/warm-idle.ts).
    await until(() => pidsMentioning(doomed.home).length === 0, 20_000, 'the dead worker\'s runners gone');
    // Never run twice: the surviving worker never held it.
    const c = connect(redis.url, { blocking: true });
    try {
      expect(await c.hget(keys.run(runId), 'worker')).toBe(doomed.id());
      expect(survivor.log()).not.toContain(runId);
    } finally {
      c.disconnect();
    }
    await stopWorker(survivor);
  }, 120_000);

  it('a launch answered BUSY by a Redis that stopped answering, whose claim reaches Redis later, holds nothing and never runs', async () => {
    const s = await server();
    const warm = await s.call('launch', { agent: 'echo', task: 'connected' });
    expect(warm.isError, textOf(warm)).toBeFalsy();
    const baseline = sc(await s.call('status', {})).capacity.active as number;
    redis.pause();
    let busy;
    try {
      busy = await s.call('launch', { agent: 'echo', task: 'answered busy', label: 'late-claim' }, { timeout: 30_000 });
    } finally {
      redis.resume();
    }
    expect(textOf(busy)).toMatch(/^BUSY: Redis could not accept the launch: it did not answer in time/);
    // The script Redis held ran when it went on; the server ends what it created at once: no slot held, nothing queued.
    await until(async () => {
      const list = await s.call('status', {});
      if (list.isError) return false;
      const late = (sc(list).runs as Array<Record<string, any>>).filter((r) => r.label === 'late-claim');
      return late.every((r) => r.state === 'failed' && r.error?.code === 'HANDSHAKE_FAILED') && sc(list).capacity.active === baseline;
    }, 30_000, 'the late claim ended and its slot returned');
    await s.call('cancel', { runId: sc(warm).runId });
  }, 120_000);

  it('Redis down: tools answer BUSY with the reason (never the URL), and work again when it returns', async () => {
    const s = await server({ SUBAGENTS_REDIS_URL: redis.url.replace('redis://', 'redis://agent:s3cret-pw@') });
    await redis.stop({ keepData: true });
    const r = await s.call('launch', { agent: 'echo', task: 'x' });
    expect(r.isError).toBe(true);
    expect(textOf(r)).toMatch(/^BUSY: Redis could not/);
    // The reason is the refused connection, answered at the first attempt that fails, not at the end of the bound.
    expect(textOf(r)).toContain('the connection was refused (ECONNREFUSED)');
    expect(textOf(r)).not.toContain('s3cret-pw');
    expect(textOf(r)).not.toContain(String(redis.port));
    expect(s.stderr()).not.toContain('s3cret-pw');
    // A server started while Redis is down, whose queue has never been connected, works too once Redis is back.
    const early = await server({ SUBAGENTS_REDIS_URL: redis.url });
    expect(textOf(await early.call('launch', { agent: 'echo', task: 'too early' }))).toMatch(/^BUSY: /);
    // A worker started while Redis is down says so once, waits, and takes runs once Redis answers.
    const w = await startWorker('before-redis', { waitUp: false });
    await until(() => w.log().includes('does not answer'), 30_000, 'the worker saying Redis does not answer');
    expect(w.log()).toContain('the connection was refused (ECONNREFUSED)');
    expect(w.id()).toBeNull();
    await redis.restart();
    await until(() => w.id() !== null, 30_000, 'the waiting worker up once Redis answers');
    expect(w.log()).toContain('answers now');
    for (const srv of [early, await mainServer()]) {
      let back: string | null = null;
      let last = '';
      await until(async () => {
        const again = await srv.call('launch', { agent: 'echo', task: 'back' });
        if (!again.isError) back = sc(again).runId;
        else last = textOf(again);
        return back !== null;
      }, 30_000, 'a launch after Redis returned').catch((e: Error) => { throw new Error(`${e.message} (${srv === early ? 'the server started while it was down' : 'the main server'}; last answer: ${last.slice(0, 300)})`); });
      expect((await waitTerminal(srv, back!, 60_000)).state).toBe('completed');
    }
    await stopWorker(w);
  }, 120_000);
});

suite('a worker Redis refuses', () => {
  it('wrong or missing credentials: the worker exits 1 naming Redis\'s refusal, never the password', async () => {
    const locked = await startRedis();
    try {
      const admin = connect(locked.url, { blocking: true });
      await admin.config('SET', 'requirepass', 'the-right-pw');
      admin.disconnect();
      const home = path.join(t.base, 'worker-refused');
      fs.mkdirSync(home, { mode: 0o700 });
      const cases: Array<[string, string]> = [[locked.url.replace('redis://', 'redis://:wrong-pw-never-shown@'), 'WRONGPASS'], [locked.url, 'NOAUTH']];
      for (const [url, code] of cases) {
        const child = spawn(process.execPath, [MAIN_JS, 'worker', '--redis', url, '--home', home, '--root', t.root], { env: { PATH: process.env.PATH, HOME: process.env.HOME }, stdio: ['ignore', 'ignore', 'pipe'] });
        let err = '';
        child.stderr!.on('data', (d: Buffer) => { err += d; });
        const exit = await Promise.race([
          new Promise<number | null>((r) => child.once('exit', (c) => r(c))),
          new Promise<'hung'>((r) => setTimeout(() => r('hung'), 30_000)),
        ]);
        if (exit === 'hung') child.kill('SIGKILL');
        expect(exit, err).toBe(1);
        expect(err).toContain(`refused the worker: it refused the credentials or the command (${code})`);
        expect(err).not.toContain('wrong-pw-never-shown');
        expect(err).not.toMatch(/worker w-/);
      }
    } finally {
      await locked.stop();
    }
  }, 90_000);
});

suite('nested delegation on a worker', () => {
  it('an agent on a worker delegates through a nested server, whose launch goes through the same Redis, and the Redis URL never reaches the agent', async () => {
    const w = await startWorker('nesting');
    writeAgent(path.join(w.home, 'agents'), 'delegate', { backend: 'command', command: ['node', path.join(FIXTURE_AGENTS, 'delegating-agent.mjs'), 'delegate'] });
    const s = await mainServer();
    const plan = { launches: [{ agent: 'echo', task: 'from the nested run' }], wait: true };
    const fin = await waitTerminal(s, sc(await s.call('launch', { agent: 'delegate', task: JSON.stringify(plan) })).runId, 90_000);
    expect(fin.state, JSON.stringify(fin.error)).toBe('completed');
    const rep = JSON.parse(fin.output.text) as { env: Record<string, string>; results: Array<{ isError: boolean; text: string; structured: { runId: string } }>; finals: Array<{ state: string; output: { text: string } }> };
    expect(rep.results.map((r) => r.isError), JSON.stringify(rep.results)).toEqual([false]);
    // The nested run is a run of the Redis, under its parent's step (test/redis/nested.test.ts covers the rest).
    expect(fin.steps[0].children).toEqual([rep.results[0]!.structured.runId]);
    expect(rep.finals[0]!.state).toBe('completed');
    expect(rep.finals[0]!.output.text).toBe('from the nested run');
    expect(JSON.stringify(rep.env)).not.toContain(redis.url);
    expect(Object.keys(rep.env)).not.toContain('SUBAGENTS_REDIS_URL');
    await stopWorker(w);
  }, 120_000);
});

suite('the command line over Redis', () => {
  const cli = (args: string[]) => new Promise<{ code: number | null; out: string; err: string }>((resolve) => {
    const c = spawn(process.execPath, [MAIN_JS, ...args, '--redis', redis.url, '--home', path.join(t.base, 'cli-home')], { env: { PATH: process.env.PATH, HOME: process.env.HOME }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = ''; let err = '';
    c.stdout!.on('data', (d: Buffer) => { out += d; });
    c.stderr!.on('data', (d: Buffer) => { err += d; });
    c.on('exit', (code) => resolve({ code, out, err }));
  });

  it('runs, show, logs --follow, cancel and dismiss see every session\'s runs in Redis', async () => {
    const w = await startWorker('cli');
    const s = await mainServer();
    const done = sc(await s.call('launch', { agent: 'echo', task: 'printed by logs' })).runId as string;
    const logs = await cli(['logs', done.slice(0, 12), '--follow']);
    expect(logs.err).toBe('');
    expect(logs.code).toBe(0);
    expect(logs.out).toBe('printed by logs');
    const runs = await cli(['runs', '--json']);
    expect(runs.code).toBe(0);
    expect(JSON.parse(runs.out).map((r: { runId: string }) => r.runId)).toContain(done);
    const show = await cli(['show', done]);
    expect(JSON.parse(show.out)).toMatchObject({ runId: done, state: 'completed' });
    const active = sc(await s.call('launch', { agent: 'sleeper', task: 'cancelled from the CLI' })).runId as string;
    await waitState(s, active, (st) => st === 'running');
    const cancel = await cli(['cancel', active]);
    expect(cancel.code, cancel.err).toBe(0);
    expect(cancel.out).toContain(`run ${active} cancelled`);
    const dismiss = await cli(['dismiss', active]);
    expect(dismiss.code, dismiss.err).toBe(0);
    expect(JSON.parse((await cli(['runs', '--json'])).out).map((r: { runId: string }) => r.runId)).not.toContain(active);
    // gc removes ended runs past retention from Redis, never an active one.
    const keeper = sc(await s.call('launch', { agent: 'sleeper', task: 'kept by gc' })).runId as string;
    const dry = await cli(['gc', '--older-than', '0ms', '--dry-run', '--json']);
    expect(JSON.parse(dry.out).removed.map((r: { runId: string }) => r.runId)).toEqual(expect.arrayContaining([done, active]));
    expect(JSON.parse(dry.out).removed.map((r: { runId: string }) => r.runId)).not.toContain(keeper);
    const gc = await cli(['gc', '--older-than', '0ms', '--json']);
    expect(gc.code, gc.err).toBe(0);
    expect((await cli(['show', done])).code).toBe(1);
    expect(JSON.parse((await cli(['show', keeper])).out).runId).toBe(keeper);
    await s.call('cancel', { runId: keeper });
    const unknown = await cli(['show', 'r-nosuchrun']);
    expect(unknown.code).toBe(1);
    expect(unknown.err).toMatch(/RUN_NOT_FOUND/);
    await stopWorker(w);
  }, 120_000);
});

suite('draining, restarts and dead servers', () => {
  it('SIGTERM drains: the running run finishes, the worker takes nothing new and exits', async () => {
    const w = await startWorker('drain', { concurrency: 1, args: ['--drain-timeout', '30000'] });
    const s = await mainServer();
    writeAgent(path.join(w.home, 'agents'), 'gate', { backend: 'command', command: ['node', FAKE, 'gate', path.join(t.base, 'drain-gate')] });
    const runId = sc(await s.call('launch', { agent: 'gate', task: 'drained' })).runId as string;
    await waitState(s, runId, (st) => st === 'running');
    const exited = new Promise<number | null>((r) => w.child.once('exit', (code) => r(code)));
    w.child.kill('SIGTERM');
    await until(() => w.log().includes('draining'), 30_000, 'the worker draining');
    const later = sc(await s.call('launch', { agent: 'echo', task: 'not for the draining worker' })).runId as string;
    fs.writeFileSync(path.join(t.base, 'drain-gate'), '');
    const fin = await waitTerminal(s, runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('drained');
    expect(await exited).toBe(0);
    expect(sc(await s.call('status', { runId: later })).state).not.toBe('running');
    // Another worker takes it.
    const next = await startWorker('after-drain');
    expect((await waitTerminal(s, later, 60_000)).state).toBe('completed');
    await stopWorker(next);
  }, 120_000);

  it('SIGTERM past the drain timeout cancels what is left, and the worker exits', async () => {
    const w = await startWorker('drain-short', { concurrency: 1, args: ['--drain-timeout', '300'] });
    const s = await mainServer();
    const runId = sc(await s.call('launch', { agent: 'sleeper', task: 'too long' })).runId as string;
    await waitState(s, runId, (st) => st === 'running');
    const exited = new Promise<number | null>((r) => w.child.once('exit', (code) => r(code)));
    w.child.kill('SIGTERM');
    const fin = await waitTerminal(s, runId, 60_000);
    expect(fin.state).toBe('cancelled');
    expect(await exited).toBe(0);
    await until(() => pidsMentioning(w.home).length === 0, 20_000, 'the drained worker\'s agents gone');
  }, 120_000);

  it('Redis stopped while a run is in flight: the run goes on on its worker and reports its end when Redis returns', async () => {
    // A stall interval over twice the outage: BullMQ renews the job's lock every half interval, so an outage shorter
    // than half of it is never a dead worker (docs/scale-out.md, "Failures").
    const w = await startWorker('outage', { concurrency: 1, env: { SUBAGENTS_STALL_INTERVAL_MS: '60000' } });
    const s = await mainServer();
    const gate = path.join(t.base, 'outage-gate');
    writeAgent(path.join(w.home, 'agents'), 'gated', { backend: 'command', command: ['node', FAKE, 'gate', gate] });
    const runId = sc(await s.call('launch', { agent: 'gated', task: 'through the outage' })).runId as string;
    await waitState(s, runId, (st) => st === 'running');
    await redis.stop({ keepData: true });
    const during = await s.call('status', { runId });
    expect(textOf(during)).toMatch(/^BUSY: Redis could not/);
    fs.writeFileSync(gate, '');
    // The run ends on the worker's machine while Redis is away.
    const localEnded = () => fs.readdirSync(path.join(w.home, 'runs')).filter((n) => n.startsWith('r-')).some((n) => {
      try { return JSON.parse(fs.readFileSync(path.join(w.home, 'runs', n, 'status.json'), 'utf8')).state === 'completed'; } catch { return false; }
    });
    await until(localEnded, 30_000, 'the run ending on its worker');
    await redis.restart();
    const fin = await waitTerminal(s, runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('through the outage');
    // The same worker takes new runs once Redis is back.
    const next = sc(await s.call('launch', { agent: 'echo', task: 'after the outage' })).runId as string;
    const nextFin = await waitTerminal(s, next, 60_000);
    expect(nextFin.state).toBe('completed');
    // It exits on SIGTERM (BullMQ's close of a connection that went through the outage once hung here).
    await stopWorker(w);
  }, 240_000);

  it('Redis stopped 5 s under load: tools answer BUSY meanwhile, and every run ends completed, none lost, none run twice', async () => {
    // A stall interval over twice the outage (docs/scale-out.md, "Failures"): an outage shorter than half of it is
    // never a dead worker. Each agent notes its task in a shared log before it naps, so a run executed twice shows twice.
    const log = path.join(t.base, 'load-outage.log');
    const nap = 'const fs=require("fs");let t="";process.stdin.on("data",(c)=>{t+=c});process.stdin.on("end",()=>{'
      + 'fs.appendFileSync(process.argv[1],t+"\\n");setTimeout(()=>process.stdout.write(t),3000)})';
    const pair = [await startWorker('load-a', { concurrency: 2, env: { SUBAGENTS_STALL_INTERVAL_MS: '60000' } }),
      await startWorker('load-b', { concurrency: 2, env: { SUBAGENTS_STALL_INTERVAL_MS: '60000' } })];
    for (const w of pair) writeAgent(path.join(w.home, 'agents'), 'nap3', { backend: 'command', command: ['node', '-e', nap, log] });
    const s = await mainServer();
    const tasks = Array.from({ length: 6 }, (_, i) => `under load ${i}`);
    const runIds: string[] = [];
    for (const task of tasks) {
      const r = await s.call('launch', { agent: 'nap3', task });
      expect(r.isError, textOf(r)).toBeFalsy();
      runIds.push(sc(r).runId as string);
    }
    const running = async () => (await Promise.all(runIds.map(async (runId) => sc(await s.call('status', { runId })).state))).filter((st) => st === 'running').length;
    await until(async () => (await running()) >= 2, 30_000, 'two runs running');
    await redis.stop({ keepData: true });
    const outageEnd = Date.now() + 5000;
    // While Redis is away a call answers BUSY: the call returns (it does not hang until Redis is back).
    const busyStatus = await s.call('status', { runId: runIds[0] });
    expect(textOf(busyStatus)).toMatch(/^BUSY: Redis could not/);
    const busyLaunch = await s.call('launch', { agent: 'nap3', task: 'refused' });
    expect(busyLaunch.isError).toBe(true);
    expect(textOf(busyLaunch)).toMatch(/^BUSY: Redis could not/);
    expect(Date.now()).toBeLessThan(outageEnd + 30_000); // not a hang past the outage
    await new Promise((r) => setTimeout(r, Math.max(0, outageEnd - Date.now()))); // the outage's length, not a wait for a state
    await redis.restart();
    for (const [i, runId] of runIds.entries()) {
      const fin = await waitTerminal(s, runId, 90_000);
      expect(fin.state, `${runId}: ${JSON.stringify(fin.error)}`).toBe('completed');
      expect(fin.output.text).toBe(tasks[i]);
    }
    // Nothing run twice, and the launch refused during the outage never ran.
    expect(fs.readFileSync(log, 'utf8').split('\n').filter(Boolean).sort()).toEqual([...tasks].sort());
    const c = connect(redis.url, { blocking: true });
    try {
      const ids = pair.map((w) => w.id());
      for (const runId of runIds) expect(ids).toContain(await c.hget(keys.run(runId), 'worker'));
      // The launch answered BUSY took no slot when Redis came back.
      expect(await c.smembers(keys.active)).toEqual([]);
    } finally {
      c.disconnect();
    }
    for (const w of pair) await stopWorker(w);
  }, 240_000);

  it('Redis restarted with AOF: an acknowledged queued launch is still there and runs when a worker comes; ended runs keep their status and output', async () => {
    const s = await mainServer();
    const early = await startWorker('before-restart');
    const ended = sc(await s.call('launch', { agent: 'echo', task: 'ended before the restart' })).runId as string;
    const endedBefore = await waitTerminal(s, ended, 60_000);
    expect(endedBefore.state).toBe('completed');
    expect((await s.call('dismiss', { runId: ended })).isError).toBeFalsy();
    await stopWorker(early);
    const runId = sc(await s.call('launch', { agent: 'echo', task: 'survives a restart' })).runId as string;
    await redis.restart();
    let state = '';
    await until(async () => {
      const r = await s.call('status', { runId });
      if (!r.isError) state = sc(r).state;
      return !r.isError;
    }, 30_000, 'status after the restart');
    expect(['starting', 'queued']).toContain(state);
    const w = await startWorker('after-restart');
    const fin = await waitTerminal(s, runId, 60_000);
    expect(fin.state).toBe('completed');
    expect(fin.output.text).toBe('survives a restart');
    const endedAfter = sc(await s.call('status', { runId: ended }));
    expect(endedAfter).toMatchObject({ state: 'completed', dismissed: true, output: { text: 'ended before the restart' } });
    expect(endedAfter.steps).toEqual(endedBefore.steps);
    const page = await s.client.readResource({ uri: `subagents://runs/${ended}/output` });
    expect((page.contents[0] as { text: string }).text).toBe('ended before the restart');
    await stopWorker(w);
  }, 120_000);

  it('a server SIGKILLed between acceptance and queueing: its slot is repaired by the next launch at a full pool', async () => {
    const c = connect(redis.url, { blocking: true });
    let orphan: string | undefined;
    try {
      const before = new Set(await c.smembers(keys.active));
      expect(before.size).toBe(0); // every earlier run has ended
      const dying = await server({ SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_TEST_FAULT: 'server-after-accept' });
      await dying.call('launch', { agent: 'echo', task: 'lost' }).catch(() => null);
      await until(async () => (await c.smembers(keys.active)).length > 0, 30_000, 'the orphan holding a slot');
      orphan = (await c.smembers(keys.active))[0];
      // It is repaired only once older than the next server's handshake timeout (200 ms).
      const created = Date.parse(JSON.parse((await c.hget(keys.run(orphan!), 'record'))!).createdAt);
      await until(() => Date.now() - created > 300, 10_000, 'the orphan older than the handshake timeout');
    } finally {
      c.disconnect();
    }
    const w = await startWorker('repair');
    const s = await server({ SUBAGENTS_MAX_ACTIVE_RUNS: '1', SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '200' });
    const r = await s.call('launch', { agent: 'echo', task: 'after the orphan', queue: false });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect((await waitTerminal(s, sc(r).runId, 60_000)).state).toBe('completed');
    const c2 = connect(redis.url, { blocking: true });
    try {
      const st = JSON.parse((await c2.hget(keys.run(orphan!), 'status'))!);
      expect(st.state).toBe('failed');
      expect(st.error.code).toBe('HANDSHAKE_FAILED');
    } finally {
      c2.disconnect();
    }
    await stopWorker(w);
  }, 120_000);
});
