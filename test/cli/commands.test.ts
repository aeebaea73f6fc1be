import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { procIdentity } from '../helpers/runs.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { cli, cliStream } from './helpers.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
const GATED = path.join(import.meta.dirname, 'fixtures', 'gated-agent.mjs');

/** The CLI drives runs a real server launched, in one temp state home. */
describe('the command line for people', { timeout: 180_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let env: Record<string, string>;
  const launch = async (agent: string, task: string, label?: string): Promise<string> => {
    const r = await s.call('launch', { agent, task, ...(label ? { label } : {}) });
    if (r.isError) throw new Error(JSON.stringify(r.content));
    return sc(r).runId as string;
  };
  const gate = (name: string) => path.join(t.base, `${name}.gate`);

  beforeAll(async () => {
    t = tempStateHome('sa-cli-');
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    writeAgent(agents, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    writeAgent(agents, 'gated', { backend: 'command', command: ['node', GATED, gate('ok'), '0'] });
    writeAgent(agents, 'gated-fail', { backend: 'command', command: ['node', GATED, gate('fail'), '3'] });
    env = { SUBAGENTS_HOME: t.home };
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterAll(async () => {
    await s?.close();
    // Nothing of this test may outlive it: stop whatever is still active (through the CLI itself).
    const active = await cli(['runs', '--json', '--all', '--state', 'active'], env).then((r) => JSON.parse(r.stdout).runs as Array<{ runId: string }>).catch(() => []);
    await Promise.all(active.map((r) => cli(['cancel', r.runId], env).catch(() => {})));
    t.cleanup();
  });

  it('--help lists every command and the serve flags; each command has --help; usage errors exit 2', async () => {
    const top = await cli(['--help'], env);
    expect(top.code).toBe(0);
    for (const c of ['serve', 'demo', 'doctor', 'runs', 'show', 'logs', 'cancel', 'dismiss', 'gc', 'watch', 'ui']) expect(top.stdout).toContain(c);
    expect(top.stdout).toContain('--max-active-runs');
    expect(top.stdout).toContain('SUBAGENTS_HANDSHAKE_TIMEOUT_MS');
    expect(top.stdout).toMatch(/Exit codes: 0/);
    // Independent processes: started together (this machine is shared; each Node start costs most of the time).
    const commands = ['serve', 'demo', 'doctor', 'runs', 'show', 'logs', 'cancel', 'dismiss', 'gc', 'watch', 'ui'];
    const helps = await Promise.all(commands.map((c) => cli([c, '--help'], env)));
    helps.forEach((h, i) => {
      expect(h.code, commands[i]).toBe(0);
      expect(h.stdout, commands[i]).toContain(`Usage: subagents-mcp ${commands[i]}`);
    });
    expect(helps[0]!.stdout).toContain('--max-agents');
    const [version, unknown, bogus, noArg, badState, badAge] = await Promise.all([
      cli(['--version'], env), cli(['frobnicate'], env), cli(['runs', '--bogus'], env), cli(['show'], env),
      cli(['runs', '--state', 'sideways'], env), cli(['gc', '--older-than', 'soon'], env),
    ]);
    expect(version.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain("unknown command 'frobnicate'");
    expect(bogus.code).toBe(2);
    expect(noArg.code).toBe(2);
    expect(badState.code).toBe(2);
    expect(badState.stderr).toContain('--state "sideways"');
    expect(badAge.code).toBe(2);
    // Ages past any date (or Date's range) are usage errors too, never an "Invalid time value" or a cutoff in year -271764.
    for (const age of ['99999999d', '99999999999999999999d']) {
      const huge = await cli(['gc', '--older-than', age, '--dry-run'], env);
      expect(huge.code, age).toBe(2);
      expect(huge.stderr).toContain('(at most 100 years)');
    }
  });

  it('runs, show and logs: every session, newest first, with evidence and files; unknown ids exit 1', async () => {
    const empty = await cli(['runs'], env);
    expect(empty.code).toBe(0);
    const done = await launch('echo', 'hello from the cli test', 'first-label');
    await waitTerminal(s, done);
    // A second server is a second session: the CLI sees both.
    const other = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
    const r = await other.call('launch', { agent: 'sleeper', task: 'zz', label: 'second-label' });
    const live = sc(r).runId as string;
    const otherSession = sc(r).sessionId as string;
    await other.close();

    // Read-only commands, independent of each other: started together.
    const [table, jsonOut, activeOut, sessionOut, show, showJson, logs] = await Promise.all([
      cli(['runs'], env), cli(['runs', '--json'], env), cli(['runs', '--json', '--state', 'active'], env),
      cli(['runs', '--json', '--session', otherSession.slice(0, 8)], env), cli(['show', done], env),
      cli(['show', done.slice(0, 8), '--json'], env), cli(['logs', done], env),
    ]);
    expect(table.code).toBe(0);
    const lines = table.stdout.trim().split('\n');
    expect(lines[0]).toMatch(/^RUN\s+STATE\s+AGENTS\s+AGE\s+DURATION\s+SESSION\s+LABEL$/);
    expect(lines[1]).toContain(live); // newest first
    expect(lines[1]).toMatch(/running/);
    expect(lines[1]).toContain('second-label');
    expect(lines[2]).toContain(done);
    expect(lines[2]).toMatch(/completed/);

    const json = JSON.parse(jsonOut.stdout);
    expect(json.runs.map((x: any) => x.runId)).toEqual([live, done]);
    expect(json.runs[1]).toMatchObject({ state: 'completed', agents: ['echo'], label: 'first-label', depth: 0 });
    expect(json.runs[1].durationMs).toBeGreaterThanOrEqual(0);
    const active = JSON.parse(activeOut.stdout);
    expect(active.runs.map((x: any) => x.runId)).toEqual([live]);
    const bySession = JSON.parse(sessionOut.stdout);
    expect(bySession.runs.map((x: any) => x.runId)).toEqual([live]);

    expect(show.code).toBe(0);
    expect(show.stdout).toContain(`run ${done}`);
    expect(show.stdout).toMatch(/state:\s+completed/);
    expect(show.stdout).toMatch(/\[0\] echo: completed — backend command, pid \d+, exit 0, 23 B output/);
    expect(show.stdout).toContain(path.join(t.home, 'runs', done, 'out', '0.txt'));
    const detail = JSON.parse(showJson.stdout);
    expect(detail.runId).toBe(done);
    expect(detail.steps[0]).toMatchObject({ state: 'completed', exitCode: 0, outputBytes: 23, backend: 'command' });
    expect(detail.steps[0].process.pid).toBeGreaterThan(0);
    expect(detail.runner.pid).toBeGreaterThan(0);
    expect(fs.readFileSync(detail.steps[0].files.output.path, 'utf8')).toBe('hello from the cli test');
    for (const f of ['record', 'status', 'events', 'runnerLog']) expect(detail.files[f].path.startsWith(path.join(t.home, 'runs', done))).toBe(true);
    expect(detail.events.map((e: any) => e.type)).toContain('ended');

    expect(logs.code).toBe(0);
    expect(logs.stdout).toBe('hello from the cli test\n');

    const missingCmds = ['show', 'logs', 'cancel', 'dismiss'];
    const missing = await Promise.all([...missingCmds.map((c) => cli([c, 'r-AAAAAAAAAAAAAAAAAAAAAAAA'], env)), cli(['show', '../../etc'], env)]);
    missing.forEach((m, i) => {
      expect(m.code, missingCmds[i] ?? 'traversal').toBe(1);
      expect(m.stderr, missingCmds[i] ?? 'traversal').toMatch(/no run "/);
      expect(m.stdout).toBe('');
    });

    // cancel: the run ends cancelled, its agent is gone; a second cancel is a no-op.
    const before = JSON.parse((await cli(['show', live, '--json'], env)).stdout);
    const agentPid = before.steps[0].process?.pid as number | undefined;
    const c = await cli(['cancel', live], env);
    expect(c.code).toBe(0);
    expect(c.stdout).toContain(`run ${live} cancelled`);
    expect(JSON.parse((await cli(['show', live, '--json'], env)).stdout).state).toBe('cancelled');
    if (agentPid) expect(procIdentity(agentPid) === null || procIdentity(agentPid)!.startTime !== before.steps[0].process.startTime).toBe(true);
    const again = await cli(['cancel', live], env);
    expect(again.code).toBe(0);
    expect(again.stdout).toContain('already ended: cancelled');
  });

  it('logs --follow prints output as it is written and ends with the run (exit 0 completed, 1 failed)', async () => {
    const ok = await launch('gated', 'go');
    const f = cliStream(['logs', ok, '--follow'], env);
    await f.waitFor('first\n');
    expect(f.done).toBe(false); // the run is still waiting on its gate: output arrived while it ran
    fs.writeFileSync(gate('ok'), '');
    expect(await f.exited).toBe(0);
    expect(f.stdout()).toBe('first\nsecond\n');
    expect(f.stderr()).toContain(`run ${ok} completed`);

    const bad = await launch('gated-fail', 'go');
    const g = cliStream(['logs', bad, '-f'], env);
    await g.waitFor('first\n');
    fs.writeFileSync(gate('fail'), '');
    expect(await g.exited).toBe(1);
    expect(g.stdout()).toBe('first\nsecond\n');
    expect(g.stderr()).toMatch(new RegExp(`run ${bad} failed — STEP_FAILED`));

    // A chain with a parallel group: every step's output in order, each under a header naming it.
    const r = await s.call('launch', { chain: [{ agent: 'echo', task: 'one' }, { parallel: [{ agent: 'echo', task: 'A:{previous}' }, { agent: 'echo', task: 'B' }] }] });
    const chain = sc(r).runId as string;
    await waitTerminal(s, chain);
    const all = await cli(['logs', chain], env);
    expect(all.code).toBe(0);
    expect(all.stdout).toBe('==> step 0 echo (completed) <==\none\n==> step 1.0 echo (completed) <==\nA:one\n==> step 1.1 echo (completed) <==\nB\n');
    const detail = JSON.parse((await cli(['show', chain, '--json'], env)).stdout);
    expect(detail.steps[1].members.map((m: any) => [m.key, m.state, m.exitCode])).toEqual([['1.0', 'completed', 0], ['1.1', 'completed', 0]]);
  });

  it('dismiss: an active run needs --cancel; a dismissed run leaves runs, stays in runs --all and show', async () => {
    const live = await launch('sleeper', 'zz', 'to-dismiss');
    const refused = await cli(['dismiss', live], env);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain('--cancel');
    const d = await cli(['dismiss', live, '--cancel'], env);
    expect(d.code).toBe(0);
    expect(d.stdout).toMatch(/dismissed \(cancelled first, cancelled\)/);
    const [listed, listedAll, shown, twice] = await Promise.all([
      cli(['runs'], env), cli(['runs', '--all'], env), cli(['show', live, '--json'], env), cli(['dismiss', live], env),
    ]);
    expect(listed.stdout).not.toContain(live);
    expect(listedAll.stdout).toMatch(new RegExp(`${live}.*\\[dismissed\\]`));
    expect(JSON.parse(shown.stdout).dismissed).toBe(true);
    expect(twice.code).toBe(0);
    expect(twice.stdout).toContain('already dismissed');
  });

  it('gc removes only terminal runs past retention, with their files; never an active or recent run', async () => {
    const old = await launch('echo', 'old run');
    const recent = await launch('echo', 'recent run');
    await waitTerminal(s, old);
    await waitTerminal(s, recent);
    const active = await launch('sleeper', 'zz', 'active-for-gc');
    // Age the first run as if it had ended 40 days ago (the test is the clock), and the active one's start too.
    const age = (id: string, field: 'endedAt' | 'startedAt') => {
      const f = path.join(t.home, 'runs', id, 'status.json');
      const st = JSON.parse(fs.readFileSync(f, 'utf8'));
      st[field] = new Date(Date.now() - 40 * 86_400_000).toISOString();
      fs.writeFileSync(f, JSON.stringify(st));
    };
    age(old, 'endedAt');
    const dry = await cli(['gc', '--dry-run', '--json'], env);
    expect(dry.code).toBe(0);
    const plan = JSON.parse(dry.stdout);
    expect(plan.removed.map((c: any) => c.rootRunId)).toEqual([old]);
    expect(plan.bytesFreed).toBeGreaterThan(0);
    expect(fs.existsSync(path.join(t.home, 'runs', old))).toBe(true);

    const run = await cli(['gc'], env);
    expect(run.code).toBe(0);
    expect(run.stdout).toContain(`removed ${old}`);
    expect(run.stdout).toMatch(/removed 1 run\(s\), [\d.]+ (B|KiB) freed/);
    expect(fs.existsSync(path.join(t.home, 'runs', old))).toBe(false);
    expect(fs.existsSync(path.join(t.home, 'runs', recent))).toBe(true);
    expect(fs.existsSync(path.join(t.home, 'runs', active))).toBe(true);

    // Even with no retention at all, an active run stays, however old it looks.
    const runningStatus = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', active, 'status.json'), 'utf8'));
    expect(runningStatus.state).toBe('running');
    // Its status torn (a disk that filled, a hand edit): unreadable, but its runner still serves it.
    const activeStatus = path.join(t.home, 'runs', active, 'status.json');
    const whole = fs.readFileSync(activeStatus, 'utf8');
    fs.writeFileSync(activeStatus, whole.slice(0, 40));
    const all = JSON.parse((await cli(['gc', '--older-than', '0s', '--json'], env)).stdout);
    expect(all.removed.flatMap((c: any) => c.runIds)).not.toContain(active);
    expect(all.keptActive).toBeGreaterThanOrEqual(1);
    expect(fs.existsSync(path.join(t.home, 'runs', active))).toBe(true);
    fs.writeFileSync(activeStatus, whole);
    expect(fs.existsSync(path.join(t.home, 'runs', recent))).toBe(false);
    expect((await cli(['logs', recent], env)).code).toBe(1);
    expect(fs.readdirSync(path.join(t.home, 'runs')).filter((n) => n.startsWith('.gc-'))).toEqual([]);
  });
});
