import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isAlive, readIdentity, type ProcessIdentity } from '../../src/process/identity.js';
import { cli } from '../cli/helpers.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, type Started } from '../helpers/server.js';
import { until } from '../nesting/tree-helpers.js';
import { FAKE_CLAUDE, pathWith } from './helpers.js';

/**
 * `agents` (and `doctor`) report each backend: found or not (SUBAGENTS_BIN_<BACKEND> or PATH), its version, why it is
 * unusable. Fake CLIs: claude (the stream-json fake, by override), opencode (on PATH, counts its runs), gemini (a
 * broken install: exits 3), codex (hangs on --version behind a wrapper shell), pi (absent).
 */

const SECRET = 'SENTINEL-not-for-clis-77e1';

describe('backends in agents and doctor', () => {
  let t: ReturnType<typeof tempStateHome>;
  let bin: string;
  let env: Record<string, string>;
  let s: Started;
  const w = (name: string, script: string) => fs.writeFileSync(path.join(bin, name), script, { mode: 0o755 });
  const lines = (name: string) => { try { return fs.readFileSync(path.join(bin, name), 'utf8').trim().split('\n').filter(Boolean); } catch { return []; } };
  /** The children the hung codex wrappers started (the server's probe and the doctor's). */
  const sleepers = () => lines('codex-sleep.pids').map((p) => readIdentity(Number(p))).filter((x): x is ProcessIdentity => x !== null);

  beforeAll(async () => {
    t = tempStateHome('sa-backends-');
    bin = path.join(t.base, 'bin');
    fs.mkdirSync(bin);
    // Each run notes who ran it ($PPID: the server or the doctor process).
    w('opencode', `#!/bin/sh\necho $PPID >> "${bin}/opencode.count"\nenv > "${bin}/opencode.env.$PPID"\necho 1.18.33\n`);
    w('gemini', '#!/bin/sh\necho "gemini requires Node.js 22 or newer (found v20)" >&2\nexit 3\n');
    // A wrapper whose real program hangs: the whole process group must go when the probe gives up.
    w('codex', `#!/bin/sh\nsleep 120 &\necho $! >> "${bin}/codex-sleep.pids"\nwait\n`);
    writeAgent(path.join(t.home, 'agents'), 'coder', { backend: 'codex' });
    env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, PATH: pathWith(bin), SUBAGENTS_BIN_CLAUDE: FAKE_CLAUDE, SERVER_ONLY_SECRET: SECRET };
    s = await startServer(env);
  });
  afterAll(async () => {
    await s.close();
    for (const p of sleepers()) { try { process.kill(p.pid, 'SIGKILL'); } catch { /* gone */ } }
    t.cleanup();
  });

  it('reports found, path, version and problem per backend; a hung CLI does not hold the call, and its process group is killed at the probe timeout', async () => {
    // doctor, in parallel: it waits for every probe to end (the hung one for its whole timeout).
    const doctor = cli(['doctor', '--json'], env);

    const first = sc(await s.call('agents'));
    const by = (r: any) => Object.fromEntries(r.backends.map((b: any) => [b.backend, b]));
    let b = by(first);
    expect(Object.keys(b).sort()).toEqual(['claude', 'codex', 'gemini', 'opencode', 'pi']);
    // Still answering --version when the call stopped waiting (at most ~1.5 s, well before the 5 s probe timeout):
    // found, no version yet, not (yet) a problem.
    expect(b.codex).toEqual({ backend: 'codex', found: true, path: path.join(bin, 'codex') });
    // The others answer at once — but a loaded machine may need more than one call's wait for that.
    const settled = (x: any) => x.version !== undefined || x.problem !== undefined;
    const deadline = Date.now() + 30_000;
    while (!['claude', 'opencode', 'gemini'].every((k) => settled(b[k])) && Date.now() < deadline) b = by(sc(await s.call('agents')));
    expect(b.claude).toEqual({ backend: 'claude', found: true, path: FAKE_CLAUDE, version: '2.1.197 (Claude Code)' });
    expect(b.opencode).toEqual({ backend: 'opencode', found: true, path: path.join(bin, 'opencode'), version: '1.18.33' });
    expect(b.gemini).toEqual({ backend: 'gemini', found: true, path: path.join(bin, 'gemini'), problem: 'gemini --version exited with 3: gemini requires Node.js 22 or newer (found v20)' });
    expect(b.pi).toEqual({ backend: 'pi', found: false, problem: expect.stringMatching(/^pi not found on PATH \(install it, or set SUBAGENTS_BIN_PI/) });
    // Agents are available by what is found; the version is the backends section's business.
    expect(first.agents.find((a: any) => a.name === 'coder')).toMatchObject({ backend: 'codex', available: true });

    await until(() => sleepers().length > 0, 'the hung codex to start its child');
    const hung = sleepers();
    // Later calls get the probe's outcome once it timed out (each call waits at most its bound, so poll).
    const end = Date.now() + 30_000;
    while (!b.codex.problem && Date.now() < end) b = by(sc(await s.call('agents')));
    expect(b.codex).toEqual({ backend: 'codex', found: true, path: path.join(bin, 'codex'), problem: 'codex --version did not answer within 5000 ms' });
    await until(() => hung.every((p) => !isAlive(p)), 'the hung CLI\'s child killed with its group', 10_000);

    // Each CLI ran once for all these calls, with the agent allowlist for an environment (no server secret).
    const byServer = () => lines('opencode.count').filter((p) => p === String(s.pid)).length;
    expect(byServer()).toBe(1);
    const probeEnv = fs.readFileSync(path.join(bin, `opencode.env.${s.pid}`), 'utf8');
    expect(probeEnv).not.toContain(SECRET);
    expect(probeEnv).not.toContain('SUBAGENTS_');
    // An upgraded CLI (another file at the same path) is probed again.
    fs.rmSync(path.join(bin, 'opencode'));
    w('opencode', `#!/bin/sh\necho $PPID >> "${bin}/opencode.count"\necho "opencode 1.19.0"\n`);
    expect(by(sc(await s.call('agents'))).opencode.version).toBe('opencode 1.19.0');
    expect(byServer()).toBe(2);

    // doctor reports the same from the same probe, found/usable per backend.
    const d = await doctor;
    expect(d.code).toBe(0);
    const rep = JSON.parse(d.stdout);
    const db = Object.fromEntries(rep.backends.map((x: any) => [x.backend, x]));
    expect(db.claude).toMatchObject({ found: true, usable: true, version: '2.1.197 (Claude Code)', bin: FAKE_CLAUDE });
    expect(db.codex).toMatchObject({ found: true, usable: false, problem: 'codex --version did not answer within 5000 ms' });
    expect(db.gemini).toMatchObject({ found: true, usable: false, problem: expect.stringContaining('exited with 3') });
    expect(db.pi).toMatchObject({ found: false, usable: false, bin: null });
    expect(d.stdout).not.toContain(SECRET);
    await until(() => sleepers().every((p) => !isAlive(p)), 'every hung codex child gone', 10_000);
  });
});
