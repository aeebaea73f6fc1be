import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS, MAIN_JS } from '../helpers/paths.js';
import { sc, startServer, textOf } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { SETTING_ENV_NAMES } from '../../src/serve-flags.js';
import { cli } from './helpers.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');
const SENTINELS = ['SENTINEL-proxy-7f3a', 'SENTINEL-lc-91bd', 'SENTINEL-key-c0de', 'SENTINEL-session-5eed0123'];

describe('doctor', { timeout: 180_000 }, () => {
  let t: ReturnType<typeof tempStateHome>;
  let env: Record<string, string>;
  let project: string;

  beforeAll(() => {
    t = tempStateHome('sa-doctor-');
    writeAgent(path.join(t.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    // An untrusted project (doctor runs in it, no roots configured) with an agent file the trust rule refuses.
    project = path.join(t.base, 'project');
    writeAgent(path.join(project, '.subagents', 'agents'), 'sneaky', { backend: 'command', command: ['sh', '-c', 'true'] });
    const bin = path.join(t.base, 'bin');
    fs.mkdirSync(bin);
    fs.writeFileSync(path.join(bin, 'claude'), '#!/bin/sh\necho "9.9.9 (Fake Claude Code)"\n', { mode: 0o755 });
    fs.writeFileSync(path.join(bin, 'gemini'), '#!/bin/sh\necho "broken install" >&2\nexit 3\n', { mode: 0o755 });
    env = {
      SUBAGENTS_HOME: t.home,
      SUBAGENTS_BIN_CLAUDE: path.join(bin, 'claude'),
      SUBAGENTS_BIN_GEMINI: path.join(bin, 'gemini'),
      SUBAGENTS_MAX_AGENTS: '5',
      // Sentinels in pass-through, credential and setting variables: their names may be printed, their values never.
      HTTPS_PROXY: `http://user:${SENTINELS[0]}@proxy.invalid:8080`,
      LC_SENTINEL: SENTINELS[1]!,
      ANTHROPIC_API_KEY: SENTINELS[2]!,
      SUBAGENTS_SESSION_ID: SENTINELS[3]!,
    };
  });
  afterAll(() => t.cleanup());

  it('reports the home, limits with their sources, backends, refused agents and variable names — never values', async () => {
    const r = await cli(['doctor', '--max-active-runs', '3'], env, { cwd: project });
    expect(r.code).toBe(0);
    for (const s of SENTINELS) {
      expect(r.stdout).not.toContain(s);
      expect(r.stderr).not.toContain(s);
    }
    expect(r.stdout).toContain(t.home);
    expect(r.stdout).toMatch(/SUBAGENTS_MAX_ACTIVE_RUNS\s+flag\s+3/);
    expect(r.stdout).toMatch(/SUBAGENTS_MAX_AGENTS\s+env\s+5/);
    expect(r.stdout).toMatch(/SUBAGENTS_MAX_DEPTH\s+default\s+3/);
    expect(r.stdout).toMatch(/SUBAGENTS_SESSION_ID\s+env\s+\(set; a fixed session id\)/);
    expect(r.stdout).toMatch(/SUBAGENTS_WARM_RUNNERS\s+default\s+2 \(0 idle in this home now/);
    expect(r.stdout).toMatch(/ok\s+claude\s+\S+\/bin\/claude\s+\(9\.9\.9 \(Fake Claude Code\)\)/);
    expect(r.stdout).toMatch(/FAIL\s+gemini\s+.*--version exited with 3/);
    expect(r.stdout).toMatch(/--\s+codex/);
    expect(r.stdout).toMatch(/sneaky \(project\) .*sneaky\.md: .*command/);
    expect(r.stdout).toMatch(/pass-through set here: .*HTTPS_PROXY/);
    expect(r.stdout).toMatch(/pass-through set here: .*LC_SENTINEL/);
    expect(r.stdout).toMatch(/claude credentials set: ANTHROPIC_API_KEY/);
    expect(r.stdout).toContain('no problems found');

    const j = await cli(['doctor', '--json'], env, { cwd: project });
    expect(j.code).toBe(0);
    for (const s of SENTINELS) expect(j.stdout).not.toContain(s);
    const report = JSON.parse(j.stdout);
    expect(report.backends.find((b: any) => b.backend === 'claude')).toMatchObject({ found: true, usable: true, version: '9.9.9 (Fake Claude Code)' });
    expect(report.backends.find((b: any) => b.backend === 'gemini')).toMatchObject({ found: true, usable: false });
    expect(report.agents.refused.some((x: any) => x.name === 'sneaky' && x.source === 'project')).toBe(true);
    expect(report.passThrough.set).toEqual(expect.arrayContaining(['HTTPS_PROXY', 'LC_SENTINEL']));
  });

  it('lists a non-terminal run whose runner died (read-only), until a listing reconciles it', async () => {
    const s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
    const launched = await s.call('launch', { agent: 'sleeper', task: 'zz' });
    const runId = sc(launched).runId as string;
    const st = sc(await s.call('status', { runId }));
    await s.close();
    process.kill(st.runnerPid as number, 'SIGKILL');
    const d = await cli(['doctor'], { SUBAGENTS_HOME: t.home });
    expect(d.code).toBe(0);
    expect(d.stdout).toMatch(new RegExp(`${runId} \\(running\\): its runner \\(pid ${st.runnerPid}\\) is gone`));
    // doctor changed nothing; `runs` reconciles (and stops the orphaned agent).
    expect(JSON.parse(fs.readFileSync(path.join(t.home, 'runs', runId, 'status.json'), 'utf8')).state).toBe('running');
    const runs = JSON.parse((await cli(['runs', '--json'], { SUBAGENTS_HOME: t.home })).stdout);
    expect(runs.runs.find((x: any) => x.runId === runId)).toMatchObject({ state: 'failed', error: { code: 'RUNNER_LOST' } });
    const again = await cli(['doctor'], { SUBAGENTS_HOME: t.home });
    expect(again.stdout).not.toContain(`${runId} (running)`);
  });

  it('a file where a home directory goes, or a directory where the ledger goes: doctor names each (exit 1), a server refuses to start', async () => {
    const u = tempStateHome('sa-broken-');
    try {
      fs.writeFileSync(path.join(u.home, 'index'), '');
      fs.mkdirSync(path.join(u.home, 'ledger.json'));
      const d = await cli(['doctor'], { SUBAGENTS_HOME: u.home });
      expect(d.code).toBe(1);
      expect(d.stdout).toMatch(/FAIL\s+\S+/);
      expect(d.stdout).toContain(`${path.join(u.home, 'index')} is a file, not a directory; remove it`);
      expect(d.stdout).toContain(`${path.join(u.home, 'ledger.json')} is a directory, not the ledger file; remove it`);
      // A server would fail every launch on it: it says why at its start instead.
      const serve = spawnSync(process.execPath, [MAIN_JS, 'serve'], { env: { PATH: process.env.PATH, SUBAGENTS_HOME: u.home }, input: '', encoding: 'utf8', timeout: 20_000 });
      expect(serve.status).not.toBe(0);
      expect(serve.stderr).toContain('unusable state home');
      expect(serve.stderr).toContain('ledger.json is a directory');
      expect(serve.stdout).toBe('');
      // A home below a file: a problem that says so, never the raw errno of an lstat.
      const below = path.join(u.home, 'index', 'home');
      const [d2, r2] = await Promise.all([cli(['doctor'], { SUBAGENTS_HOME: below }), cli(['runs'], { SUBAGENTS_HOME: below })]);
      expect(d2.code).toBe(1);
      expect(d2.stdout).toContain(`${below} cannot be a directory: a part of its path is a file`);
      expect(r2.code).toBe(1);
      expect(r2.stderr).not.toContain('ENOTDIR');
    } finally {
      u.cleanup();
    }
  });

  it('shows every setting a flag or variable sets, with where its value came from', async () => {
    const r = await cli(['doctor', '--json', '--lock-wait-ms', '200'], env);
    const rows = (JSON.parse(r.stdout) as { settings: Array<{ env: string; source: string; value: string }> }).settings;
    expect(rows.map((x) => x.env)).toEqual(expect.arrayContaining(SETTING_ENV_NAMES));
    expect(rows.find((x) => x.env === 'SUBAGENTS_LOCK_WAIT_MS')).toMatchObject({ source: 'flag', value: '200' });
  });

  it('a home that cannot be made (below a dangling link, under /proc, a name too long): doctor names it (exit 1), a server exits saying so', async () => {
    const u = tempStateHome('sa-unmakeable-');
    try {
      fs.symlinkSync(path.join(u.base, 'unmounted-volume'), path.join(u.base, 'state'));
      const homes: Array<[string, string]> = [
        [path.join(u.base, 'state', 'home'), 'is a symlink to nothing'],
        [path.join(u.base, 'x'.repeat(300), 'home'), 'cannot be used (ENAMETOOLONG)'],
      ];
      if (fs.existsSync('/proc/1')) homes.push(['/proc/1/nope', 'cannot be made']);
      for (const [home, why] of homes) {
        const d = await cli(['doctor'], { SUBAGENTS_HOME: home });
        expect(d.code, home).toBe(1);
        expect(d.stdout).toContain(why);
        // Node's recursive mkdir loops forever under /proc: the server must exit, with the setting to change.
        const serve = spawnSync(process.execPath, [MAIN_JS, 'serve'], { env: { PATH: process.env.PATH, SUBAGENTS_HOME: home }, input: '', encoding: 'utf8', timeout: 20_000 });
        expect(serve.status, `${home}: ${serve.stderr}`).toBe(2);
        expect(serve.stderr).toContain('choose another SUBAGENTS_HOME');
        expect(serve.stderr).not.toMatch(/^\s+at /m);
      }
    } finally {
      u.cleanup();
    }
  });

  it('roots that name no directory: a problem when none does (exit 1), a warning when some do; the launch refusal names them', async () => {
    const u = tempStateHome('sa-roots-');
    try {
      const typo = path.join(u.base, 'projetc');
      const none = await cli(['doctor'], { SUBAGENTS_HOME: u.home, SUBAGENTS_ROOTS: typo });
      expect(none.code).toBe(1);
      expect(none.stdout).toContain(`problem: no root SUBAGENTS_ROOTS names is an existing directory (${typo})`);
      const some = await cli(['doctor'], { SUBAGENTS_HOME: u.home, SUBAGENTS_ROOTS: [u.root, typo].join(path.delimiter) });
      expect(some.code).toBe(0);
      expect(some.stdout).toContain(`warning: SUBAGENTS_ROOTS names a path that is not a directory (${typo})`);
      writeAgent(path.join(u.home, 'agents'), 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
      const s = await startServer({ SUBAGENTS_HOME: u.home, SUBAGENTS_ROOTS: typo });
      try {
        const refused = await s.call('launch', { agent: 'sleeper', task: 'x' });
        expect(refused.isError).toBe(true);
        expect(textOf(refused)).toBe(`CWD_NOT_ALLOWED: no root SUBAGENTS_ROOTS (or --root) names is an existing directory (${JSON.stringify(typo)}); fix the path or create the directory.`);
        // Made after the server started: picked up at the next launch.
        fs.mkdirSync(typo, { mode: 0o700 });
        const ok = await s.call('launch', { agent: 'sleeper', task: 'x' });
        expect(ok.isError, textOf(ok)).toBeFalsy();
        await s.call('cancel', { runId: sc(ok).runId });
      } finally {
        await s.close();
      }
    } finally {
      u.cleanup();
    }
  });

  it('warns about a ~ in a path setting, which no shell expands', async () => {
    const u = tempStateHome('sa-doctor-tilde-');
    try {
      const d = await cli(['doctor'], { SUBAGENTS_HOME: u.home, SUBAGENTS_ROOTS: '~/projects' }, { cwd: u.base });
      expect(d.stdout).toContain(`warning: SUBAGENTS_ROOTS names ${path.join(u.base, '~', 'projects')}: a ~ is not expanded`);
    } finally {
      u.cleanup();
    }
  });

  it('shows control characters in file names escaped: a refused agent file cannot forge a line or drive the terminal', async () => {
    const u = tempStateHome('sa-doctor-names-');
    try {
      const dir = path.join(u.home, 'agents');
      fs.mkdirSync(dir, { mode: 0o700 });
      fs.writeFileSync(path.join(dir, 'x\n  ok    reviewer (claude, operator)\u001b[2K.md'), '---\nname: [unclosed\n---\n', { mode: 0o600 });
      const d = await cli(['doctor'], { SUBAGENTS_HOME: u.home });
      expect(d.stdout).not.toContain('\u001b');
      expect(d.stdout.split('\n').some((l) => l.startsWith('  ok    reviewer'))).toBe(false);
      expect(d.stdout).toContain('x\\x0a  ok    reviewer (claude, operator)\\x1b[2K.md');
    } finally {
      u.cleanup();
    }
  });

  it('an unsafe state home is a problem (exit 1) and the other commands refuse it', async () => {
    const u = tempStateHome('sa-unsafe-');
    try {
      fs.chmodSync(u.home, 0o777);
      const [d, r, bad] = await Promise.all([
        cli(['doctor'], { SUBAGENTS_HOME: u.home }), cli(['runs'], { SUBAGENTS_HOME: u.home }),
        cli(['doctor', '--max-depth', 'lots'], { SUBAGENTS_HOME: u.home }),
      ]);
      expect(d.code).toBe(1);
      expect(d.stdout).toMatch(/FAIL\s+\S+/);
      expect(d.stdout).toContain('group- or world-writable');
      expect(r.code).toBe(1);
      expect(r.stderr).toMatch(/unsafe state home: .*world-writable.*doctor/);
      expect(bad.code).toBe(2);
      expect(bad.stderr).toContain('SUBAGENTS_MAX_DEPTH must be a whole number');
    } finally {
      u.cleanup();
    }
  });
});
