import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { MAIN_JS } from '../helpers/paths.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { exitWithin, FAKE, modesUnder, runDirs } from './support.js';

const ENV_SENTINEL = 'env-sentinel-7f3a91c2d4';
const TASK_SENTINEL = 'task-sentinel-5be08d11aa';

/** What SPEC §3 lets an agent see: the base list, pass-through, the nesting variables and the system prompt file. */
const ALLOWED = new Set(['HOME', 'LOGNAME', 'PATH', 'SHELL', 'TERM', 'USER', 'LANG', 'TMPDIR', 'TZ', 'LC_ALL', 'LC_CTYPE',
  'SUBAGENTS_HOME', 'SUBAGENTS_PARENT_RUN_ID', 'SUBAGENTS_ROOT_RUN_ID', 'SUBAGENTS_DEPTH', 'SUBAGENTS_BUDGET', 'SUBAGENTS_RUN_TOKEN',
  'SUBAGENTS_SYSTEM_PROMPT_FILE']);

describe('secrets stay in: environment and task sentinels, agent environment allowlist, private state files', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome();
    const agents = path.join(t.home, 'agents');
    writeAgent(agents, 'env', { backend: 'command', command: ['node', FAKE, 'env'] });
    writeAgent(agents, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '30000'] });
    writeAgent(agents, 'failer', { backend: 'command', command: ['node', FAKE, 'exit', '3'] });
    s = await startServer({
      SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300',
      SECRET_SENTINEL: ENV_SENTINEL, AWS_SECRET_ACCESS_KEY: ENV_SENTINEL, GITHUB_TOKEN: ENV_SENTINEL,
      DATABASE_URL: `postgres://u:${ENV_SENTINEL}@db/x`, GIT_SSH_COMMAND: ENV_SENTINEL, BASH_ENV: ENV_SENTINEL,
      PYTHONSTARTUP: ENV_SENTINEL, NODE_OPTIONS: '--no-deprecation',
      // The server's own settings are not the agent's business either.
      SUBAGENTS_MAX_ACTIVE_RUNS: '7', SUBAGENTS_SESSION_ID: `sess-${'s'.repeat(20)}`,
      TZ: 'UTC', LC_ALL: 'C.UTF-8',
    });
  });
  afterAll(async () => {
    await s.close();
    t.cleanup();
  });

  const runs: string[] = [];

  it('the agent sees only allowlisted variables', async () => {
    const r = await s.call('launch', { agent: 'env', task: 'print env' });
    const fin = await waitTerminal(s, sc(r).runId);
    runs.push(fin.runId);
    expect(fin.state).toBe('completed');
    const seen = JSON.parse(fs.readFileSync(path.join(t.home, 'runs', fin.runId, 'out', '0.txt'), 'utf8')) as { env: Record<string, string> };
    const names = Object.keys(seen.env);
    expect(names.filter((n) => !ALLOWED.has(n))).toEqual([]);
    for (const n of ['HOME', 'PATH', 'TZ', 'LC_ALL', 'SUBAGENTS_RUN_TOKEN', 'SUBAGENTS_BUDGET', 'SUBAGENTS_DEPTH']) expect(names, n).toContain(n);
    expect(seen.env.SUBAGENTS_DEPTH).toBe('1');
    expect(JSON.stringify(seen.env)).not.toContain(ENV_SENTINEL);
  });

  it('a task sentinel and an environment sentinel appear in no listing, no status, no resource, no event and no refusal', async () => {
    const task = `do the thing with ${TASK_SENTINEL}`;
    const l = await s.call('launch', { agent: 'sleeper', task, label: 'a labelled run' });
    expect(l.isError, textOf(l)).toBeFalsy();
    const runId = sc(l).runId as string;
    runs.push(runId);
    // The detached runner itself holds only what its agents may get: no server secret sits in its environment.
    const runnerPid = sc(await s.call('status', { runId })).runnerPid as number;
    const runnerEnv = fs.readFileSync(`/proc/${runnerPid}/environ`, 'latin1');
    expect(runnerEnv).not.toContain(ENV_SENTINEL);
    expect(runnerEnv).not.toContain('NODE_OPTIONS=');
    expect(fs.readFileSync(`/proc/${runnerPid}/cmdline`, 'latin1')).not.toContain(TASK_SENTINEL);
    const f = sc(await s.call('launch', { agent: 'failer', task }));
    runs.push(f.runId);
    const failed = await waitTerminal(s, f.runId);
    expect(failed.state).toBe('failed');

    // Refusals of calls that carry the task (names and ids a refusal quotes are not secrets; tasks are).
    const refusals = await Promise.all([
      s.call('launch', { agent: 'nope', task }),
      s.call('launch', { agent: 'sleeper', task, cwd: '/' }),
      s.call('launch', { task }),
      s.call('launch', { agent: 'sleeper', task, bogus: TASK_SENTINEL }),
      s.call('launch', { agent: 'sleeper', task, model: 'not-a-model' }),
      s.call('launch', { tasks: [{ agent: 'sleeper', task }, { agent: 'nope', task }] }),
      s.call('launch', { agent: 'sleeper', task: `${TASK_SENTINEL}${'x'.repeat(2 * 1024 * 1024)}` }),
    ]);
    for (const r of refusals) {
      expect(r.isError).toBe(true);
      expect(textOf(r)).not.toContain(TASK_SENTINEL);
      expect(textOf(r)).not.toContain(ENV_SENTINEL);
    }

    const views = [
      await s.call('status', {}),
      await s.call('status', { all: true }),
      await s.call('status', { runId }),
      await s.call('status', { runId: f.runId, outputBytes: 65536 }),
      await s.call('agents'),
    ];
    const resources = await s.client.listResources();
    const reads = await Promise.all([
      s.client.readResource({ uri: `subagents://runs/${runId}` }),
      s.client.readResource({ uri: `subagents://runs/${runId}/events` }),
      s.client.readResource({ uri: `subagents://runs/${f.runId}/events` }),
    ]);
    const c = await s.call('cancel', { runId });
    expect(sc(c).state).toBe('cancelled');
    views.push(c, await s.call('status', { runId }));
    const all = JSON.stringify([views, resources, reads]);
    expect(all).not.toContain(TASK_SENTINEL);
    expect(all).not.toContain(ENV_SENTINEL);
  });

  it('every file under the state home is 0600 and every directory 0700; nothing is a symlink', () => {
    expect(runs.length).toBe(3);
    const entries = modesUnder(t.home);
    expect(entries.length).toBeGreaterThan(20);
    const wrong = entries.filter((e) => (e.kind === 'file' && e.mode !== 0o600) || (e.kind === 'dir' && e.mode !== 0o700) || e.kind === 'symlink' || e.kind === 'other');
    expect(wrong.map((e) => `${path.relative(t.home, e.path)} ${e.kind} ${e.mode.toString(8)}`)).toEqual([]);
    expect(fs.statSync(t.home).mode & 0o777).toBe(0o700);
  });

  it('the server stderr carries neither sentinel', async () => {
    const err = s.stderr();
    expect(err).not.toContain(TASK_SENTINEL);
    expect(err).not.toContain(ENV_SENTINEL);
  });
});

describe.concurrent('an unsafe state home is refused at start', () => {
  let t: ReturnType<typeof tempStateHome>;
  beforeAll(() => { t = tempStateHome(); });
  afterAll(() => t.cleanup());

  /** Starts the server with stdin held open; it must exit by itself. */
  async function startFails(home: string): Promise<{ code: number | null; stderr: string }> {
    const child = spawn(process.execPath, [MAIN_JS, 'serve'], {
      env: { PATH: process.env.PATH ?? '', HOME: t.base, SUBAGENTS_HOME: home, SUBAGENTS_ROOTS: t.root },
      stdio: ['pipe', 'pipe', 'pipe'],
    });
    let stderr = '';
    let stdout = '';
    child.stderr.on('data', (b: Buffer) => { stderr += b.toString(); });
    child.stdout.on('data', (b: Buffer) => { stdout += b.toString(); });
    const exited = await exitWithin(child, 15_000, 'close'); // its stderr read to the end, not just the process gone
    if (!exited) child.kill('SIGKILL');
    expect(exited, 'the server kept running on an unsafe home').not.toBeNull();
    expect(stdout).toBe(''); // stdout is the protocol: nothing but JSON-RPC, and nothing at all here
    return { code: exited!.code, stderr };
  }

  it('a symlink', async () => {
    const real = path.join(t.base, 'real-home');
    fs.mkdirSync(real, { mode: 0o700 });
    const link = path.join(t.base, 'link-home');
    fs.symlinkSync(real, link);
    const r = await startFails(link);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/unsafe state home: .*link-home is a symlink/);
    expect(fs.readdirSync(real)).toEqual([]);
  });

  it.each(['770', '707', '777', '720'])('mode %s (group- or world-writable)', async (octal) => {
    const mode = parseInt(octal, 8);
    const home = path.join(t.base, `home-${mode.toString(8)}`);
    fs.mkdirSync(home);
    fs.chmodSync(home, mode);
    const r = await startFails(home);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('group- or world-writable');
    expect(r.stderr).toContain(`chmod 700 ${home}`);
    expect(fs.readdirSync(home)).toEqual([]);
  });

  it.runIf(process.getuid?.() === 0)('owned by another user (checked when the tests run as root)', async () => {
    const home = path.join(t.base, 'foreign-home');
    fs.mkdirSync(home, { mode: 0o700 });
    fs.chownSync(home, 65534, 65534);
    const r = await startFails(home);
    expect(r.code).not.toBe(0);
    expect(r.stderr).toMatch(/owned by uid 65534, not by this user/);
  });

  it('a missing home is created 0700 (and the server then serves)', async () => {
    const home = path.join(t.base, 'fresh', 'nested', 'home');
    const s = await startServer({ SUBAGENTS_HOME: home, SUBAGENTS_ROOTS: t.root });
    try {
      expect((await s.call('agents')).isError).toBeFalsy();
      expect(fs.statSync(home).mode & 0o777).toBe(0o700);
      expect(runDirs(home)).toEqual([]);
    } finally {
      await s.close();
    }
  });
});
