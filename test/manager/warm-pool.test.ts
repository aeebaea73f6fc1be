import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { FAKE, identityOf, ledger, pidsMentioning, readJson, runDirs, stillRunning, type Identity } from '../e2e/support.js';

/**
 * Warm runners (docs/architecture.md, "Warm runners"): pre-booted idle runners of a state home, claimed by launches.
 * Real servers, real runners, real fake agents. Every fault of the pool ends as the same failure as a booted runner's:
 * an idle runner's death costs nothing, a claimed one's is HANDSHAKE_FAILED or RUNNER_LOST, and a claimant's death
 * leaves no runner behind and nothing held.
 */
/** Waits for `cond` (bounded: a hang fails with what was awaited, never a speed grade). */
async function until(cond: () => boolean | Promise<boolean>, what: string, maxMs = 10_000): Promise<void> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) {
    if (await cond()) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  if (!(await cond())) throw new Error(`timed out waiting for ${what}`);
}

function idleRunners(home: string): Identity[] {
  const dir = path.join(home, 'warm');
  let names: string[] = [];
  try { names = fs.readdirSync(dir).filter((n) => n.endsWith('.idle')); } catch { /* not made yet */ }
  return names.flatMap((n) => {
    try { return [readJson(path.join(dir, n)) as Identity]; } catch { return []; }
  }).filter((id) => stillRunning(id));
}

describe('warm runners', () => {
  let t: ReturnType<typeof tempStateHome> | undefined;
  const servers: Started[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
    t?.cleanup();
    t = undefined;
  });

  async function serve(env: Record<string, string> = {}): Promise<Started> {
    const s = await startServer({ SUBAGENTS_HOME: t!.home, SUBAGENTS_ROOTS: t!.root, SUBAGENTS_WARM_RUNNERS: '2', SUBAGENTS_SESSION_ID: 'warm-pool-session-0001', ...env });
    servers.push(s);
    return s;
  }

  function setup(): void {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '30000'] });
  }

  async function poolOf(n: number): Promise<Identity[]> {
    await until(() => idleRunners(t!.home).length >= n, `${n} idle runners`, 20_000);
    return idleRunners(t!.home);
  }

  it('a launch runs on an idle runner, and a replacement boots', async () => {
    setup();
    const s = await serve();
    const idle = await poolOf(2);
    const r = await s.call('launch', { agent: 'echo', task: 'hello warm' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const runId = sc(r).runId as string;
    const done = sc(await s.call('status', { runId, waitMs: 30_000, until: 'terminal' }));
    expect(done.state).toBe('completed');
    const status = readJson(path.join(t!.home, 'runs', runId, 'status.json'));
    expect(idle.map((i) => i.pid)).toContain(status.runner.pid);
    // Its environment and log are the run's: the agent got the task, and the claim file with the environment is gone.
    expect(fs.readFileSync(path.join(t!.home, 'runs', runId, 'out', '0.txt'), 'utf8')).toContain('hello warm');
    expect(fs.readdirSync(path.join(t!.home, 'warm')).filter((n) => n.endsWith('.claim') || n.endsWith('.taken'))).toEqual([]);
    await poolOf(2);
    expect(ledger(t!.home).roots).toEqual({});
  });

  it('an idle runner rehearses in a scratch home of its own: the real home gets no run, ledger entry or leftover', async () => {
    setup();
    // A scratch home left by a runner killed mid-rehearsal (a dead pid) is removed by the next runner that boots.
    const warm = path.join(t!.home, 'warm');
    fs.mkdirSync(warm, { recursive: true, mode: 0o700 });
    const stale = path.join(warm, 'rehearsal-999999999-1');
    fs.mkdirSync(path.join(stale, 'runs'), { recursive: true, mode: 0o700 });
    const s = await serve();
    const idle = await poolOf(2);
    expect(fs.existsSync(stale)).toBe(false);
    expect(fs.readdirSync(warm).filter((n) => n.startsWith('rehearsal-'))).toEqual([]);
    expect(runDirs(t!.home)).toEqual([]);
    expect(fs.existsSync(path.join(t!.home, 'ledger.json')) ? ledger(t!.home) : { roots: {}, agents: {}, trees: {} }).toMatchObject({ roots: {}, agents: {}, trees: {} });
    // Its rehearsal's agent is gone (nothing else in its process group), and it still serves a run as its own.
    for (const id of idle) expect(pidsMentioning(`rehearsal-${id.pid}-`)).toEqual([]);
    const r = await s.call('launch', { agent: 'echo', task: 'after the rehearsal' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const done = sc(await s.call('status', { runId: sc(r).runId, waitMs: 30_000, until: 'terminal' }));
    expect(done.state).toBe('completed');
    expect(fs.readFileSync(path.join(t!.home, 'runs', sc(r).runId, 'out', '0.txt'), 'utf8')).toContain('after the rehearsal');
    expect(idle.map((i) => i.pid)).toContain(readJson(path.join(t!.home, 'runs', sc(r).runId, 'status.json')).runner.pid);
  });

  it("the rehearsal leaves the supervisor's code cache; a damaged cache is refused, replaced, and costs nothing else", async () => {
    setup();
    const s = await serve();
    const idle = await poolOf(2);
    const warm = path.join(t!.home, 'warm');
    const caches = () => fs.readdirSync(warm).filter((n) => n.startsWith('supervisor-') && n.endsWith('.v8cache'));
    await until(() => caches().length === 1, 'the code cache written');
    const cache = path.join(warm, caches()[0]!);
    expect(fs.statSync(cache).mode & 0o777).toBe(0o600);
    // Garbage in its place: the runners that boot next must refuse it (V8 checks it), compile as without it, and
    // write a good one again.
    fs.writeFileSync(cache, Buffer.alloc(4096, 7));
    for (const id of idle) process.kill(id.pid, 'SIGKILL');
    await until(() => idle.every((id) => !stillRunning(id)), 'the idle runners gone');
    const r = await s.call('launch', { agent: 'echo', task: 'with a damaged cache' });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(await s.call('status', { runId: sc(r).runId, waitMs: 30_000, until: 'terminal' })).state).toBe('completed');
    await until(() => idleRunners(t!.home).filter((id) => !idle.some((old) => old.pid === id.pid)).length >= 1, 'a replacement idle');
    await until(() => !fs.readFileSync(cache).equals(Buffer.alloc(4096, 7)), 'the cache written again', 20_000);
    const again = await s.call('launch', { agent: 'echo', task: 'with the cache again' });
    expect(sc(await s.call('status', { runId: sc(again).runId, waitMs: 30_000, until: 'terminal' })).state).toBe('completed');
  });

  it('an idle runner killed while idle costs nothing: launches still start, and it is replaced', async () => {
    setup();
    const s = await serve();
    const [victim] = await poolOf(2);
    const victimLog = readJson(path.join(t!.home, 'warm', `${victim!.pid}-${victim!.startTime}.idle`)).log as string;
    expect(victimLog).toMatch(/^boot-.*\.log$/);
    expect(fs.existsSync(path.join(t!.home, 'warm', victimLog))).toBe(true);
    process.kill(victim!.pid, 'SIGKILL');
    await until(() => !stillRunning(victim!), 'the idle runner gone');
    for (let i = 0; i < 3; i++) {
      const r = await s.call('launch', { agent: 'echo', task: `after the kill ${i}` });
      expect(r.isError, textOf(r)).toBeFalsy();
      const done = sc(await s.call('status', { runId: sc(r).runId, waitMs: 30_000, until: 'terminal' }));
      expect(done.state).toBe('completed');
      expect(done.runner?.pid ?? readJson(path.join(t!.home, 'runs', sc(r).runId, 'status.json')).runner.pid).not.toBe(victim!.pid);
    }
    expect(fs.existsSync(path.join(t!.home, 'warm', `${victim!.pid}-${victim!.startTime}.idle`))).toBe(false);
    expect(fs.existsSync(path.join(t!.home, 'warm', victimLog))).toBe(false); // its boot log went with it
    expect(ledger(t!.home).roots).toEqual({});
  });

  it('a claimed runner that dies before ready: HANDSHAKE_FAILED, no agent, nothing held', async () => {
    setup();
    // The pool is filled by a server without the fault; the fault reaches the claimed runner with its run's environment.
    const filler = await serve();
    const idle = await poolOf(2);
    await filler.close();
    const s = await serve({ SUBAGENTS_TEST_FAULT: 'before-ready', SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '20000' });
    const r = await s.call('launch', { agent: 'echo', task: 'must never run' });
    // A warm runner is bound and told to proceed at its claim (its identity is known): its death shows at proceed.
    expect(textOf(r)).toMatch(/^HANDSHAKE_FAILED: .*the proceed phase: the runner exited/);
    const [runId] = runDirs(t!.home);
    const status = readJson(path.join(t!.home, 'runs', runId!, 'status.json'));
    expect(status.state).toBe('failed');
    expect(status.error.code).toBe('HANDSHAKE_FAILED');
    expect(status.steps[0].state).toBe('skipped');
    expect(fs.existsSync(path.join(t!.home, 'runs', runId!, 'out', '0.txt'))).toBe(false);
    // It was one of the idle runners, and it is gone.
    expect(idle.filter((i) => stillRunning(i)).length).toBeLessThan(2);
    expect(pidsMentioning(path.join(t!.home, 'runs', runId!))).toEqual([]);
    expect(ledger(t!.home).roots).toEqual({});
    expect(ledger(t!.home).trees).toEqual({});
  });

  it('a claimed runner killed while its run is running: RUNNER_LOST, its agent stopped, the slot back', async () => {
    setup();
    const s = await serve();
    const idle = await poolOf(2);
    const r = await s.call('launch', { agent: 'sleeper', task: 'sleep' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const runId = sc(r).runId as string;
    const runDir = path.join(t!.home, 'runs', runId);
    const status = readJson(path.join(runDir, 'status.json'));
    expect(idle.map((i) => i.pid)).toContain(status.runner.pid);
    await until(() => readJson(path.join(runDir, 'status.json')).steps[0].pid != null || fs.existsSync(path.join(runDir, 'out', '0.err')), 'the agent started');
    process.kill(status.runner.pid, 'SIGKILL');
    await until(async () => {
      const st = sc(await s.call('status', { runId }));
      return st.state === 'failed' && st.error?.code === 'RUNNER_LOST';
    }, 'RUNNER_LOST', 40_000);
    const token = readJson(path.join(runDir, 'run.json')).runToken as string;
    await until(() => pidsMentioning(token).length === 0, 'the agent stopped', 20_000);
    await until(() => Object.keys(ledger(t!.home).roots).length === 0, 'the slot back', 20_000);
  });

  /** A launch of a run that stays running, as its status and its ledger root show it; then its cancel. */
  async function sleeperRun(s: Started): Promise<{ runner: Identity; root: { runner: unknown; boundEarly?: true }; stop: () => Promise<void> }> {
    const r = await s.call('launch', { agent: 'sleeper', task: 'sleep' });
    expect(r.isError, textOf(r)).toBeFalsy();
    const runId = sc(r).runId as string;
    const runner = readJson(path.join(t!.home, 'runs', runId, 'status.json')).runner as Identity;
    const root = ledger(t!.home).roots[runId] as { runner: unknown; boundEarly?: true };
    const stop = async () => {
      const c = await s.call('cancel', { runId });
      expect(c.isError, textOf(c)).toBeFalsy();
      await until(() => Object.keys(ledger(t!.home).roots).length === 0, 'the slot back', 20_000);
    };
    return { runner, root, stop };
  }

  it('a launch binds its reservation to the idle runner it then claims, in one ledger section', async () => {
    setup();
    const s = await serve();
    const idle = await poolOf(2);
    const run = await sleeperRun(s);
    expect(idle.map((i) => `${i.pid}:${i.startTime}`)).toContain(`${run.runner.pid}:${run.runner.startTime}`);
    expect(run.root.runner).toEqual(run.runner); // bound in the reservation (its flag goes at the next prune after proceed)
    await run.stop();
  });

  it('the runner a reservation was bound to is taken by another server first: the run is bound to the runner it got', async () => {
    setup();
    const s = await serve({ SUBAGENTS_TEST_FAULT: 'warm-taken-after-reserve' });
    await poolOf(2);
    const run = await sleeperRun(s);
    // The one taken away: its `.taken` waits for a claim that never comes (it exits after the handshake timeout).
    const taken = fs.readdirSync(path.join(t!.home, 'warm')).filter((n) => n.endsWith('.taken')).map((n) => Number(n.split('-')[0]));
    expect(taken).toHaveLength(1);
    expect(run.runner.pid).not.toBe(taken[0]);
    // The slot is bound to the process that serves the run, as an ordinary bound reservation.
    expect(run.root.runner).toEqual(run.runner);
    expect(run.root.boundEarly).toBeUndefined();
    await run.stop();
  });

  // The runner the reservation is bound to is told to proceed before its claim (docs/architecture.md, "Warm
  // runners"): a claimant that dies at either phase before proceed has taken a runner it never gave the run.
  it.each(['server-after-spawn', 'server-after-bind'])('its claimant dies at %s: the taken runner never gets the run and exits, the run ends failed, nothing is held', async (fault) => {
    setup();
    const filler = await serve({ SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '1500' });
    await poolOf(2);
    await filler.close();
    const s = await serve({ SUBAGENTS_TEST_FAULT: fault, SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '1500' });
    await s.call('launch', { agent: 'echo', task: 'never proceeds' }).catch(() => null);
    const [runId] = runDirs(t!.home);
    expect(runId).toBeDefined();
    const runDir = path.join(t!.home, 'runs', runId!);
    // Bound in the reservation to the runner it took, which waits for a claim that never comes.
    const taken = ledger(t!.home).roots[runId!]?.runner as Identity | undefined;
    expect(taken).toBeDefined();
    await until(() => !stillRunning(taken!), 'the taken runner exited', 20_000);
    // It never adopted the run (an adopted runner writes ready.json first thing), and no proceed was said.
    expect(fs.existsSync(path.join(runDir, 'ready.json'))).toBe(false);
    expect(fs.existsSync(path.join(runDir, 'proceed'))).toBe(false);
    expect(fs.readdirSync(path.join(t!.home, 'warm')).filter((n) => n.startsWith(`${taken!.pid}-`))).toEqual([]);
    const healthy = await serve({ SUBAGENTS_WARM_RUNNERS: '0' });
    const st = sc(await healthy.call('status', { runId }));
    expect(st.state).toBe('failed');
    expect(st.error.code).toBe('HANDSHAKE_FAILED');
    expect(fs.existsSync(path.join(runDir, 'out', '0.txt'))).toBe(false);
    await until(() => Object.keys(ledger(t!.home).roots).length === 0, 'the slot back', 20_000);
  });

  it('its claimant dies between taking it and telling it the run: it exits on its own, holding nothing', async () => {
    setup();
    const filler = await serve({ SUBAGENTS_HANDSHAKE_TIMEOUT_MS: '1000' });
    const [victim] = await poolOf(1);
    await filler.close();
    const warm = path.join(t!.home, 'warm');
    const key = fs.readdirSync(warm).find((n) => n.startsWith(`${victim!.pid}-`) && n.endsWith('.idle'))!.slice(0, -5);
    fs.renameSync(path.join(warm, `${key}.idle`), path.join(warm, `${key}.taken`)); // exactly what a claimant does first
    await until(() => identityOf(victim!.pid)?.startTime !== victim!.startTime, 'the taken runner exited', 20_000);
    expect(fs.readdirSync(warm).filter((n) => n.startsWith(`${key}.`))).toEqual([]);
    expect(runDirs(t!.home)).toEqual([]);
  });

  it('a runner killed between its take and its claim: the pool\'s next look removes its names, its claim and its boot log', async () => {
    setup();
    const filler = await serve();
    const [victim] = await poolOf(1);
    await filler.close();
    const warm = path.join(t!.home, 'warm');
    const key = fs.readdirSync(warm).find((n) => n.startsWith(`${victim!.pid}-`) && n.endsWith('.idle'))!.slice(0, -5);
    const bootLog = readJson(path.join(warm, `${key}.idle`)).log as string;
    expect(fs.existsSync(path.join(warm, bootLog))).toBe(true);
    // Stopped first, so it cannot read the claim below before the kill lands: the case is a runner that never read it.
    process.kill(-victim!.pid, 'SIGSTOP');
    // What a claimant leaves when the runner dies before reading its claim: the take, the claim (the run's environment).
    fs.renameSync(path.join(warm, `${key}.idle`), path.join(warm, `${key}.taken`));
    fs.writeFileSync(path.join(warm, `${key}.claim`), JSON.stringify({ runDir: path.join(t!.home, 'runs', 'r-x'), env: { HOME: '/nowhere' } }), { mode: 0o600 });
    process.kill(-victim!.pid, 'SIGKILL');
    await until(() => !stillRunning(victim!), 'the taken runner gone');
    await serve(); // its pool fills a second after its start, and looks at what is there first
    await until(() => !fs.readdirSync(warm).some((n) => n.startsWith(`${key}.`) || n === bootLog), 'the dead runner\'s files gone', 20_000);
  });

  it('servers started together on one home keep one pool of its size between them, not one each', async () => {
    setup();
    await Promise.all([1, 2, 3, 4].map((i) => serve({ SUBAGENTS_SESSION_ID: `warm-pool-session-000${i + 1}` })));
    await poolOf(2);
    // Each server's fill runs a second after its start; by now every boot any of them made has announced itself.
    await new Promise((res) => setTimeout(res, 4000));
    expect(idleRunners(t!.home)).toHaveLength(2);
    expect(fs.readdirSync(path.join(t!.home, 'warm')).filter((n) => /^boot-\d+-[0-9a-f]{12}\.log$/.test(n))).toHaveLength(2);
  });

  it('a runner of another build is never claimed', async () => {
    setup();
    const s = await serve();
    const [other] = await poolOf(2);
    const warm = path.join(t!.home, 'warm');
    const name = fs.readdirSync(warm).find((n) => n.startsWith(`${other!.pid}-`) && n.endsWith('.idle'))!;
    const tmp = path.join(warm, '.other.tmp');
    fs.writeFileSync(tmp, JSON.stringify({ pid: other!.pid, startTime: other!.startTime, build: '/elsewhere/runner/main.cjs@1' }), { mode: 0o600 });
    fs.renameSync(tmp, path.join(warm, name));
    for (let i = 0; i < 3; i++) {
      const r = await s.call('launch', { agent: 'echo', task: `not on the other build ${i}` });
      expect(r.isError, textOf(r)).toBeFalsy();
      expect(sc(await s.call('status', { runId: sc(r).runId, waitMs: 30_000, until: 'terminal' })).state).toBe('completed');
      expect(readJson(path.join(t!.home, 'runs', sc(r).runId, 'status.json')).runner.pid).not.toBe(other!.pid);
    }
    expect(fs.existsSync(path.join(warm, name))).toBe(true); // left to retire on its own
  });

  it('SUBAGENTS_WARM_RUNNERS=0 boots a runner per launch and keeps no pool', async () => {
    setup();
    const s = await serve({ SUBAGENTS_WARM_RUNNERS: '0' });
    const r = await s.call('launch', { agent: 'echo', task: 'cold' });
    expect(r.isError, textOf(r)).toBeFalsy();
    expect(sc(await s.call('status', { runId: sc(r).runId, waitMs: 30_000, until: 'terminal' })).state).toBe('completed');
    await new Promise((res) => setTimeout(res, 1500));
    expect(idleRunners(t!.home)).toEqual([]);
  });
});
