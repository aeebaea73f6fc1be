import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';

/**
 * The README's first commands, from a fresh clone of the committed repository, as a newcomer types them. Slow (an
 * `npm ci` and a build: a minute or more), so it runs only in CI or when SUBAGENTS_TEST_FRESH_CLONE=1.
 */
const enabled = process.env.SUBAGENTS_TEST_FRESH_CLONE === '1' || process.env.CI === 'true';
const BOUND_MS = 8 * 60_000;

describe.skipIf(!enabled)('a fresh clone', () => {
  it('README: `npm ci && npm run demo` works from the committed state', { timeout: BOUND_MS + 30_000 }, () => {
    const readme = fs.readFileSync(path.join(REPO, 'README.md'), 'utf8');
    // The test follows the README: if the first screen stops saying this, the test must change with it.
    expect(readme).toContain('npm ci && npm run demo');
    const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sa-clone-')));
    const deadline = Date.now() + BOUND_MS;
    const left = () => Math.max(1000, deadline - Date.now());
    try {
      const dir = path.join(base, 'subagents-mcp');
      const env = { ...process.env, SUBAGENTS_HOME: path.join(base, 'state'), NO_COLOR: '1' } as NodeJS.ProcessEnv;
      // The runner's own test-only variables must not leak into the newcomer's session.
      delete env.SUBAGENTS_TEST_FAULT;
      delete env.NODE_OPTIONS;
      const run = (cmd: string, args: string[], cwd: string) => {
        const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', timeout: left(), killSignal: 'SIGKILL', maxBuffer: 32 * 1024 * 1024 });
        const tail = `${r.stdout ?? ''}\n${r.stderr ?? ''}`.slice(-3000);
        expect(r.status, `${cmd} ${args.join(' ')} failed (${r.signal ?? r.status}):\n${tail}`).toBe(0);
        return r.stdout;
      };
      run('git', ['clone', '--quiet', '--no-hardlinks', REPO, dir], base);
      const ci = spawnSync('npm', ['ci', '--prefer-offline', '--no-audit', '--no-fund'], { cwd: dir, env, encoding: 'utf8', timeout: left(), killSignal: 'SIGKILL', maxBuffer: 32 * 1024 * 1024 });
      expect(ci.status, `npm ci failed:\n${`${ci.stdout}\n${ci.stderr}`.slice(-3000)}`).toBe(0);
      // No dependency may ask for a newer Node than the package supports (the Inspector did: it lives in a cache now).
      expect(`${ci.stdout}\n${ci.stderr}`).not.toContain('EBADENGINE');
      const out = run('npm', ['run', 'demo'], dir);
      expect(out).toMatch(/launched r-\S+/);
      expect(out).toMatch(/run r-\S+ completed/);
      expect(out).toContain('# Report from demo-summarizer');
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });
});
