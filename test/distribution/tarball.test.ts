/**
 * The README's install from a packed tarball, as a new user does it: `npm pack`, `npm install -g` of the tarball
 * (into a temp prefix, not the machine's), then `subagents-mcp` from another directory: `--version` and `doctor`
 * print the package version, and the demo completes and ends with hints that name `subagents-mcp`, which is on PATH.
 * `npm publish --dry-run`'s file list is the same `npm pack` list: no tests, no source maps, the bin and server.json.
 * Slow (an install of the dependencies from the registry), so it runs in CI or with SUBAGENTS_TEST_TARBALL=1.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';

const enabled = process.env.SUBAGENTS_TEST_TARBALL === '1' || process.env.CI === 'true';
const BOUND_MS = 5 * 60_000;

describe.skipIf(!enabled)('the packed tarball, installed globally', () => {
  it('installs, prints its version, and runs the demo from another directory', { timeout: BOUND_MS + 30_000 }, () => {
    const pkg = JSON.parse(fs.readFileSync(path.join(REPO, 'package.json'), 'utf8')) as { name: string; version: string; engines: { node: string }; bin: Record<string, string> };
    const base = fs.realpathSync(fs.mkdtempSync(path.join(os.tmpdir(), 'sa-tarball-')));
    const deadline = Date.now() + BOUND_MS;
    const prefix = path.join(base, 'global');
    const elsewhere = path.join(base, 'elsewhere');
    fs.mkdirSync(elsewhere);
    const env = { ...process.env, NO_COLOR: '1', SUBAGENTS_HOME: path.join(base, 'state'), PATH: `${path.join(prefix, 'bin')}${path.delimiter}${process.env.PATH ?? ''}` } as NodeJS.ProcessEnv;
    delete env.SUBAGENTS_TEST_FAULT;
    delete env.NODE_OPTIONS;
    const run = (cmd: string, args: string[], cwd: string) => {
      const r = spawnSync(cmd, args, { cwd, env, encoding: 'utf8', timeout: Math.max(1000, deadline - Date.now()), killSignal: 'SIGKILL', maxBuffer: 32 * 1024 * 1024 });
      expect(r.status, `${cmd} ${args.join(' ')} failed (${r.signal ?? r.status}):\n${`${r.stdout}\n${r.stderr}`.slice(-3000)}`).toBe(0);
      return r.stdout;
    };
    try {
      // --ignore-scripts: the suite has built dist/ already (prepack would build it again).
      const packed = JSON.parse(run('npm', ['pack', '--json', '--ignore-scripts', '--pack-destination', base], REPO)) as Array<{ filename: string; files: Array<{ path: string }> }>;
      const files = packed[0]!.files.map((f) => f.path);
      expect(files).toEqual(expect.arrayContaining(['package.json', 'README.md', 'LICENSE', 'server.json', pkg.bin[pkg.name]!, 'dist/server.js', 'agents/demo-summarizer.md']));
      expect(files.filter((f) => f.startsWith('test/') || f.startsWith('src/') || f.endsWith('.map') || f.endsWith('.mcpb'))).toEqual([]);
      expect(pkg.engines.node).toMatch(/^>=\d/);

      run('npm', ['install', '-g', '--prefix', prefix, '--prefer-offline', '--no-audit', '--no-fund', path.join(base, packed[0]!.filename)], base);
      expect(run('subagents-mcp', ['--version'], elsewhere).trim()).toBe(pkg.version);
      expect(run('subagents-mcp', ['doctor'], elsewhere).split('\n').slice(0, 2)).toEqual([
        expect.stringContaining(`subagents-mcp ${pkg.version} · node `),
        'run as: subagents-mcp <command>',
      ]);
      const demo = run('subagents-mcp', ['demo'], elsewhere);
      expect(demo).toMatch(/run r-\S+ completed/);
      const hint = /Look at it again: subagents-mcp show (r-\S+)/.exec(demo);
      expect(hint, demo.slice(-500)).not.toBeNull();
      expect(run('subagents-mcp', ['show', hint![1]!], elsewhere)).toContain('completed');
    } finally {
      fs.rmSync(base, { recursive: true, force: true });
    }
  });
});
