/**
 * F5 — hostile state files. A FIFO (made with mkfifo), a directory, or a file of 20 MiB in place of a state file:
 * `status.json`, `run.json`, the run's output, `ledger.json`, the session's run index. A plain open of a FIFO for
 * reading waits for a writer forever, and in a server that is the event loop: every later call would hang.
 * Expect: each damaged run is STATE_CORRUPT for that run only (naming the file and what it is, never blocking), a
 * FIFO in the output's place reads as no output, the ledger is rebuilt, listings and the CLI's `runs` answer, and the
 * server still exits at once on stdin EOF. Every call is bounded so a hang fails the test instead of stalling it.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { cli } from '../cli/helpers.js';
import { FAKE, pidAlive, until } from './fault-helpers.js';

const CALL_BOUND_MS = 15_000;
const hasMkfifo = spawnSync('mkfifo', ['--version']).status === 0;

describe.skipIf(process.platform !== 'linux' || !hasMkfifo)('F5 hostile state files (FIFOs, directories, huge files)', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let env: Record<string, string>;
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root };
    s = await startServer(env);
  });
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  const runFile = (runId: string, name: string) => path.join(t.home, 'runs', runId, name);
  const fifo = (file: string) => { fs.rmSync(file, { recursive: true, force: true }); execFileSync('mkfifo', ['-m', '600', file]); };
  const call = (name: string, args: Record<string, unknown>) => s.call(name, args, { timeout: CALL_BOUND_MS });

  it('a FIFO, a directory or a huge file in place of a state file is STATE_CORRUPT for that run only; the server stays responsive', async () => {
    const ids: string[] = [];
    for (let i = 0; i < 6; i++) {
      const r = await s.call('launch', { agent: 'echo', task: `task ${i}` });
      expect(r.isError, textOf(r)).toBeFalsy();
      ids.push(sc(r).runId);
    }
    for (const id of ids) expect((await waitTerminal(s, id)).state).toBe('completed');
    const [fifoStatus, dirStatus, hugeStatus, fifoRecord, fifoOutput, fine] = ids as [string, string, string, string, string, string];

    fifo(runFile(fifoStatus, 'status.json'));
    fs.rmSync(runFile(dirStatus, 'status.json'));
    fs.mkdirSync(runFile(dirStatus, 'status.json'));
    // Larger than any real status (sparse: no disk used), a JSON that would parse if read whole.
    const fd = fs.openSync(runFile(hugeStatus, 'status.json'), 'r+');
    fs.ftruncateSync(fd, 20 * 1024 * 1024);
    fs.closeSync(fd);
    fifo(runFile(fifoRecord, 'run.json'));
    fifo(runFile(fifoOutput, path.join('out', 'run.txt')));
    fifo(path.join(t.home, 'ledger.json'));
    for (const f of fs.readdirSync(path.join(t.home, 'index'))) if (f.endsWith('.runs')) fifo(path.join(t.home, 'index', f));

    for (const [id, what] of [[fifoStatus, 'a FIFO'], [dirStatus, 'a directory'], [hugeStatus, 'bytes, more than']] as const) {
      const r = await call('status', { runId: id });
      expect(r.isError).toBe(true);
      expect(textOf(r)).toMatch(/^STATE_CORRUPT: /);
      expect(textOf(r)).toContain(`status.json of ${id}`);
      expect(textOf(r)).toContain(what);
    }
    const rec = await call('status', { runId: fifoRecord });
    expect(rec.isError).toBe(true);
    expect(textOf(rec)).toMatch(/^(STATE_CORRUPT|RUN_NOT_FOUND): /);

    // A FIFO in the output's place is no output, not a hang.
    const out = await call('status', { runId: fifoOutput });
    expect(out.isError, textOf(out)).toBeFalsy();
    expect(sc(out).state).toBe('completed');

    const fineNow = await call('status', { runId: fine });
    expect(fineNow.isError, textOf(fineNow)).toBeFalsy();
    expect(sc(fineNow).state).toBe('completed');

    const list = await call('status', {});
    expect(list.isError, textOf(list)).toBeFalsy();
    const listed = (sc(list).runs as Array<{ runId: string }>).map((r) => r.runId);
    expect(listed).toEqual(expect.arrayContaining([fine, fifoOutput, fifoStatus]));

    // The ledger (a FIFO) is rebuilt: a new launch is admitted and completes.
    const again = await call('launch', { agent: 'echo', task: 'after' });
    expect(again.isError, textOf(again)).toBeFalsy();
    expect((await waitTerminal(s, sc(again).runId)).state).toBe('completed');
    expect(fs.statSync(path.join(t.home, 'ledger.json')).isFile()).toBe(true);

    const runs = await cli(['runs', '--json'], env, { timeoutMs: 30_000 });
    expect(runs.code, runs.stderr).toBe(0);
    expect(runs.stdout).toContain(fine);

    // Stdin EOF still ends the server at once: nothing is stuck in a blocking open.
    const pid = s.pid;
    await s.close();
    expect(await until(() => !pidAlive(pid), 5_000)).toBe(true);
  }, 120_000);
});
