import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, type Started } from '../helpers/server.js';
import { FAKE, ledger, pidsMentioning, readJson, stillRunning, type Identity } from '../e2e/support.js';

/**
 * Runner reuse (docs/architecture.md, "Warm runners"): a warm runner whose run ended cleanly goes back to the pool and
 * serves another run, carrying nothing of the first. Real servers, real runners, real fake agents.
 */
async function until(cond: () => boolean | Promise<boolean>, what: string, maxMs = 20_000): Promise<void> {
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

const envOf = (pid: number): string => fs.readFileSync(`/proc/${pid}/environ`, 'latin1');

describe('warm runner reuse', () => {
  let t: ReturnType<typeof tempStateHome> | undefined;
  const servers: Started[] = [];
  afterEach(async () => {
    for (const s of servers.splice(0)) await s.close();
    t?.cleanup();
    t = undefined;
  });

  async function serve(env: Record<string, string> = {}): Promise<Started> {
    t ??= tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'env', { backend: 'command', command: ['node', FAKE, 'env'] });
    writeAgent(path.join(t.home, 'agents'), 'gate', { backend: 'command', command: ['node', FAKE, 'gate', path.join(t.home, 'gate-open')] });
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '30000'] });
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_WARM_RUNNERS: '1', SUBAGENTS_SESSION_ID: 'warm-reuse-session-0001', ...env });
    servers.push(s);
    return s;
  }

  const runDir = (runId: string) => path.join(t!.home, 'runs', runId);
  const statusOf = (runId: string) => readJson(path.join(runDir(runId), 'status.json'));

  async function launch(s: Started, agent: string, task: string): Promise<string> {
    const r = await s.call('launch', { agent, task });
    expect(r.isError, textOf(r)).toBeFalsy();
    return sc(r).runId as string;
  }

  async function finish(s: Started, runId: string): Promise<Record<string, any>> {
    return sc(await s.call('status', { runId, waitMs: 30_000, until: 'terminal' }));
  }

  /**
   * A run of `agent` on a runner that already served an `env` run to its end: the pair's run ids and the runner.
   * Retried a few times: a runner whose first run outlasted the pool's patience (a loaded machine) may have been
   * replaced and exited instead, which is the pool's choice, not a failure.
   */
  async function secondRunOnSameRunner(s: Started, agent: string): Promise<{ first: string; second: string; runner: Identity }> {
    await until(() => idleRunners(t!.home).length >= 1, 'an idle runner');
    for (let attempt = 0; attempt < 5; attempt++) {
      const first = await launch(s, 'env', `first ${attempt}`);
      expect((await finish(s, first)).state).toBe('completed');
      const runner = statusOf(first).runner as Identity;
      await until(() => !stillRunning(runner) || idleRunners(t!.home).some((i) => i.pid === runner.pid), 'the runner back in the pool or gone');
      if (!stillRunning(runner)) continue;
      const second = await launch(s, agent, `second ${attempt}`);
      const secondRunner = statusOf(second).runner as Identity;
      if (secondRunner.pid === runner.pid && secondRunner.startTime === runner.startTime) return { first, second, runner };
      await finish(s, second);
    }
    throw new Error('no runner served two runs in turn in five attempts');
  }

  it('a runner serves two runs in turn, each with its own environment, token, log and directory', async () => {
    const s = await serve();
    const { first, second, runner } = await secondRunOnSameRunner(s, 'env');
    expect((await finish(s, second)).state).toBe('completed');
    const seen = [first, second].map((id) => JSON.parse(fs.readFileSync(path.join(runDir(id), 'out', '0.txt'), 'utf8')) as { env: Record<string, string>; umask: number });
    const tokens = [first, second].map((id) => readJson(path.join(runDir(id), 'run.json')).runToken as string);
    expect(seen[0]!.env.SUBAGENTS_RUN_TOKEN).toBe(tokens[0]);
    expect(seen[1]!.env.SUBAGENTS_RUN_TOKEN).toBe(tokens[1]);
    expect(tokens[0]).not.toBe(tokens[1]);
    expect(seen[0]!.env.SUBAGENTS_PARENT_RUN_ID).toBe(first);
    expect(seen[1]!.env.SUBAGENTS_PARENT_RUN_ID).toBe(second);
    expect(seen[1]!.umask).toBe(seen[0]!.umask);
    // Both runs name the same process as their runner, and its own environment is its boot's: no run's token.
    for (const id of [first, second]) expect(statusOf(id).runner).toEqual(runner);
    for (const tok of tokens) expect(envOf(runner.pid)).not.toContain(tok);
    // Back in the pool after the second run too: idle, its command line naming the pool, its log a boot log.
    await until(() => idleRunners(t!.home).some((i) => i.pid === runner.pid), 'the runner idle again');
    const cmd = fs.readFileSync(`/proc/${runner.pid}/cmdline`, 'latin1');
    expect(cmd).toContain(`--warm ${path.join(t!.home, 'warm')}`);
    expect(cmd).not.toContain(second);
    const idleEntry = readJson(path.join(t!.home, 'warm', `${runner.pid}-${runner.startTime}.idle`));
    expect(fs.statSync(`/proc/${runner.pid}/fd/2`).ino).toBe(fs.statSync(path.join(t!.home, 'warm', idleEntry.log)).ino);
    for (const id of [first, second]) expect(fs.statSync(path.join(runDir(id), 'runner.log')).ino).not.toBe(fs.statSync(`/proc/${runner.pid}/fd/2`).ino);
    for (const id of [first, second]) expect(fs.existsSync(path.join(runDir(id), 'runner.log'))).toBe(true);
    expect(fs.readlinkSync(`/proc/${runner.pid}/cwd`)).toBe(path.join(t!.home, 'warm'));
    expect(fs.readdirSync(path.join(t!.home, 'warm')).filter((n) => /\.(claim|taken|serving)$/.test(n))).toEqual([]);
    expect(ledger(t!.home).roots).toEqual({});
    expect(ledger(t!.home).agents).toEqual({});
  });

  it('a cancel of the ended first run does not reach the second run on the same runner', async () => {
    const s = await serve();
    const { first, second, runner } = await secondRunOnSameRunner(s, 'gate');
    const cancelled = await s.call('cancel', { runId: first });
    expect(sc(cancelled).state).toBe('completed');
    // What a canceller racing the first run's end would have left: a request in its directory.
    fs.writeFileSync(path.join(runDir(first), 'cancel-request.json'), JSON.stringify({ reason: 'CANCELLED', at: new Date().toISOString() }), { mode: 0o600 });
    // A non-event: longer than the runner's slow poll of its run's directory (500 ms), then the gate opens.
    await new Promise((r) => setTimeout(r, 1500));
    expect(statusOf(second).state).toBe('running');
    fs.writeFileSync(path.join(t!.home, 'gate-open'), '');
    const done = await finish(s, second);
    expect(done.state).toBe('completed');
    expect(statusOf(first).state).toBe('completed');
    expect(statusOf(second).runner).toEqual(runner);
  });

  it('a reused runner killed while idle costs nothing; killed while serving, its run is RUNNER_LOST', async () => {
    const s = await serve();
    const { second, runner } = await secondRunOnSameRunner(s, 'sleeper');
    await until(() => statusOf(second).steps[0].process != null, 'the agent started');
    process.kill(runner.pid, 'SIGKILL');
    await until(async () => {
      const st = sc(await s.call('status', { runId: second }));
      return st.state === 'failed' && st.error?.code === 'RUNNER_LOST';
    }, 'RUNNER_LOST', 40_000);
    const token = readJson(path.join(runDir(second), 'run.json')).runToken as string;
    await until(() => pidsMentioning(token).length === 0, 'the agent stopped');
    await until(() => Object.keys(ledger(t!.home).roots).length === 0, 'the slot back');
    // Idle after a run: killed there, the next launch takes another runner and completes.
    const again = await secondRunOnSameRunner(s, 'env');
    expect((await finish(s, again.second)).state).toBe('completed');
    await until(() => idleRunners(t!.home).some((i) => i.pid === again.runner.pid), 'the runner idle again');
    process.kill(again.runner.pid, 'SIGKILL');
    await until(() => !stillRunning(again.runner), 'the idle runner gone');
    const next = await launch(s, 'env', 'after the idle kill');
    expect((await finish(s, next)).state).toBe('completed');
    expect(statusOf(next).runner.pid).not.toBe(again.runner.pid);
    expect(ledger(t!.home).roots).toEqual({});
  });

  it("an idle runner's one child is its agent stub, which the next run's first agent becomes: started before the launch", async () => {
    if (process.platform !== 'linux' || !['/bin/dash', '/usr/bin/dash'].some((p) => fs.existsSync(p))) return; // no stub here
    const s = await serve();
    const childrenOf = (pid: number) => fs.readdirSync(`/proc/${pid}/task`).flatMap((tid) => fs.readFileSync(`/proc/${pid}/task/${tid}/children`, 'utf8').split(' ').filter(Boolean).map(Number));
    await until(() => idleRunners(t!.home).some((i) => childrenOf(i.pid).length === 1), 'an idle runner with its stub');
    const idle = idleRunners(t!.home).find((i) => childrenOf(i.pid).length === 1)!;
    const [stubPid] = childrenOf(idle.pid);
    expect(fs.readFileSync(`/proc/${stubPid}/environ`, 'latin1')).toBe(''); // nothing of any run, nothing secret
    expect(fs.readFileSync(`/proc/${stubPid}/cmdline`, 'latin1')).toMatch(/dash\0-c\0/);
    // The launch takes this runner (the only idle one with SUBAGENTS_WARM_RUNNERS=1) and its first agent is the stub.
    const runId = await launch(s, 'env', 'via the stub');
    expect((await finish(s, runId)).state).toBe('completed');
    const st = statusOf(runId);
    if (st.runner.pid !== idle.pid) return; // another runner took it (a replacement booted meanwhile): not this case
    expect(st.steps[0].process.pid).toBe(stubPid);
    const seen = JSON.parse(fs.readFileSync(path.join(runDir(runId), 'out', '0.txt'), 'utf8')) as { env: Record<string, string> };
    expect(seen.env.SUBAGENTS_RUN_TOKEN).toBe(readJson(path.join(runDir(runId), 'run.json')).runToken);
    expect(Object.keys(seen.env).filter((k) => ['PWD', 'OLDPWD', 'SHLVL', '_'].includes(k))).toEqual([]);
  });

  it('SUBAGENTS_WARM_RUNNER_RUNS bounds the runs of one runner: it exits after its last', async () => {
    const s = await serve({ SUBAGENTS_WARM_RUNNER_RUNS: '2' });
    const { second, runner } = await secondRunOnSameRunner(s, 'env');
    expect((await finish(s, second)).state).toBe('completed');
    await until(() => !stillRunning(runner), 'the runner exited after its second run');
    expect(fs.readdirSync(path.join(t!.home, 'warm')).filter((n) => n.startsWith(`${runner.pid}-`))).toEqual([]);
    const next = await launch(s, 'env', 'on another runner');
    expect((await finish(s, next)).state).toBe('completed');
  });

  it('SUBAGENTS_WARM_RUNNER_RUNS=1: a warm runner serves one run and exits', async () => {
    const s = await serve({ SUBAGENTS_WARM_RUNNER_RUNS: '1' });
    await until(() => idleRunners(t!.home).length >= 1, 'an idle runner');
    const first = await launch(s, 'env', 'one run');
    expect((await finish(s, first)).state).toBe('completed');
    const runner = statusOf(first).runner as Identity;
    await until(() => !stillRunning(runner), 'the runner exited');
  });
});
