/**
 * F6 — disk faults on the runner's side. The runner writes most of status.json (each step's start and end, the
 * run's end); those writes happen in the runner process, where the in-process seam of f06-disk-faults.test.ts cannot
 * reach. The runner seam `SUBAGENTS_TEST_FAULT=status-write:<which>:<ERRNO>[:<times>]` (src/runner/test-write-fault.ts,
 * forwarded by the server to its runners like the other seams) fails the runner's status.json writes that carry
 * the state `which` at write(2). Real server, real runner, real agent.
 *
 * Expect:
 * - an intermediate write that fails fewer times than the runner's attempts (3) is retried and the run is untouched;
 * - one that keeps failing is given up (runner.log and the event log say so) and the run goes on: the next write
 *   carries the state, and the run completes with its output;
 * - a terminal write that keeps failing ends the run recorded failed/STEP_FAILED, its message naming status.json and
 *   the errno, when a write can still succeed;
 * - when no terminal write can succeed, the runner exits saying why, and reconciliation records failed/RUNNER_LOST
 *   quoting that line (and the runner log tail);
 * - every time: no agent process and no temp file left, the slot back.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, launchOk, pidAlive, pidsWithToken, readRecord, tempFiles, until } from './fault-helpers.js';

describe.skipIf(process.platform === 'win32')('F6 disk faults at the runner\'s status writes', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started | null = null;
  afterEach(async () => {
    await s?.close();
    s = null;
    t.cleanup();
  });

  /** A server whose runners fail their status writes per `fault`; one echo run through it, left to end. */
  async function runWith(fault: string): Promise<{ runId: string; log: () => string; events: () => Array<Record<string, any>> }> {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', SUBAGENTS_TEST_FAULT: fault });
    const runId = await launchOk(s, { agent: 'echo', task: 'the task text' });
    const dir = path.join(t.home, 'runs', runId);
    return {
      runId,
      log: () => fs.readFileSync(path.join(dir, 'runner.log'), 'utf8'),
      events: () => fs.readFileSync(path.join(dir, 'events.jsonl'), 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l)),
    };
  }

  async function expectClean(runId: string): Promise<void> {
    expect(pidsWithToken(readRecord(t.home, runId).runToken)).toEqual([]);
    expect(tempFiles(t.home)).toEqual([]);
    const l = JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8'));
    expect(await until(() => Object.keys(JSON.parse(fs.readFileSync(path.join(t.home, 'ledger.json'), 'utf8')).roots).length === 0, 10_000), JSON.stringify(l)).toBe(true);
    expect(sc(await s!.call('status', {})).capacity.active).toBe(0);
  }

  it('a transient failure of a step write (EIO twice) is retried: the run completes untouched', async () => {
    const r = await runWith('status-write:running:EIO:2');
    const v = await waitTerminal(s!, r.runId);
    expect(v.state).toBe('completed');
    expect(v.output.text).toContain('the task text');
    expect(r.log()).not.toMatch(/could not write/);
    await expectClean(r.runId);
  });

  it.each(['ENOSPC', 'EIO'])('every step write refused (%s): each is given up after its retries, the run goes on and completes', async (code) => {
    const r = await runWith(`status-write:running:${code}`);
    const v = await waitTerminal(s!, r.runId);
    expect(v.state).toBe('completed');
    expect(v.error).toBeNull();
    expect(v.output.text).toContain('the task text');
    // The terminal write carried the whole state the failed writes could not.
    expect(v.steps[0].state).toBe('completed');
    expect(v.steps[0].exitCode).toBe(0);
    expect(r.log()).toContain(`runner: could not write status.json (${code}) after 3 attempts; going on, the next write carries the state`);
    expect(r.events().filter((e) => e.type === 'status-write-failed').map((e) => e.code)).toContain(code);
    await expectClean(r.runId);
  });

  it('the terminal write refused (ENOSPC) while a later write succeeds: the run is recorded failed/STEP_FAILED naming the cause', async () => {
    const r = await runWith('status-write:completed:ENOSPC');
    const v = await waitTerminal(s!, r.runId);
    expect(v.state).toBe('failed');
    expect(v.error.code).toBe('STEP_FAILED');
    expect(v.error.message).toMatch(/^the runner could not write status\.json \(ENOSPC\)/);
    expect(r.log()).toContain('runner: could not write status.json');
    await expectClean(r.runId);
  });

  it('no terminal write can succeed (EIO): the runner exits saying why, and reconciliation records RUNNER_LOST quoting it', async () => {
    const r = await runWith('status-write:terminal:EIO');
    const runnerPid = sc(await s!.call('status', { runId: r.runId })).runnerPid as number;
    expect(runnerPid).toBeGreaterThan(0);
    expect(await until(() => !pidAlive(runnerPid), 30_000)).toBe(true);
    const v = await waitTerminal(s!, r.runId);
    expect(v.state).toBe('failed');
    expect(v.error.code).toBe('RUNNER_LOST');
    expect(v.error.message).toMatch(/it said: "could not write status\.json \(EIO\) to record the run failed either/);
    expect(v.runnerLogTail).toContain('(EIO)');
    await expectClean(r.runId);
  });

  it('a server with the seam unset is unaffected (sanity: the seam is off by default)', async () => {
    const r = await runWith('none');
    const v = await waitTerminal(s!, r.runId);
    expect(v.state, JSON.stringify(v.error)).toBe('completed');
    await expectClean(r.runId);
  });
});
