import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { pathToFileURL } from 'node:url';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';

// The built module: the spawner thread's file exists only in dist/ (from src/ the thread cannot start and every
// spawn would take the synchronous path, which this test must not mistake for the thread's).
type Mod = typeof import('../../src/process/spawn-detached.js');
const load = (): Promise<Mod> => import(pathToFileURL(path.join(REPO, 'dist', 'process', 'spawn-detached.js')).href) as Promise<Mod>;

// Reports its pid, process group and session, writes to stdout (the log), and exits 3.
const PROGRAM = `const fs = require('node:fs');
const raw = fs.readFileSync('/proc/self/stat', 'utf8');
const stat = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
fs.writeFileSync(process.argv[1], JSON.stringify({ pid: process.pid, pgid: Number(stat[2]), sid: Number(stat[3]), env: process.env.PROBE }));
process.stdout.write('to the log\\n');
process.exit(3);`;

describe.skipIf(process.platform !== 'linux')('spawnDetached', () => {
  let dir: string;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-spawn-')); });
  afterEach(() => { fs.rmSync(dir, { recursive: true, force: true }); });

  const start = async (m: Mod, name: string) => {
    const report = path.join(dir, `${name}.json`);
    const logFile = path.join(dir, `${name}.log`);
    const child = await m.spawnDetached([process.execPath, '-e', PROGRAM, report], { cwd: dir, env: { PROBE: name, PATH: process.env.PATH ?? '' }, logFile });
    const exit = await new Promise<[number | null, string | null]>((resolve) => {
      if (child.exitCode !== null) resolve([child.exitCode, child.signalCode]);
      else child.once('exit', (code: number | null, signal: string | null) => resolve([code, signal]));
    });
    return { child, exit, report: JSON.parse(fs.readFileSync(report, 'utf8')), log: fs.readFileSync(logFile, 'utf8') };
  };

  it('starts the program detached (own session and group), with our env and log, and reports its pid and exit — before and once the spawner thread is up', async () => {
    const m = await load();
    const first = await start(m, 'first'); // the thread is only booting: spawned on this thread
    expect(await m.spawnerSettled()).toBe(true);
    const second = await start(m, 'second'); // on the spawner thread
    for (const [name, r] of [['first', first], ['second', second]] as const) {
      expect(r.report.pid).toBe(r.child.pid);
      expect(r.report.pgid).toBe(r.child.pid);
      expect(r.report.sid).toBe(r.child.pid);
      expect(r.report.env).toBe(name);
      expect(r.exit).toEqual([3, null]);
      expect(r.log).toBe('to the log\n');
    }
  });

  it('refuses a log path that is a symlink (the runner log must not be redirected) and starts nothing', async () => {
    const m = await load();
    expect(await m.spawnerSettled()).toBe(true);
    const target = path.join(dir, 'elsewhere');
    fs.writeFileSync(target, '');
    fs.symlinkSync(target, path.join(dir, 'planted.log'));
    const report = path.join(dir, 'never.json');
    await expect(m.spawnDetached([process.execPath, '-e', PROGRAM, report], { cwd: dir, env: {}, logFile: path.join(dir, 'planted.log') }))
      .rejects.toMatchObject({ code: 'ELOOP' });
    expect(fs.existsSync(report)).toBe(false);
    expect(fs.readFileSync(target, 'utf8')).toBe('');
  });
});
