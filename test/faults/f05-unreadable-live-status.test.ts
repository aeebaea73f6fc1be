/**
 * F5 — a live run's status.json damaged, seen by a listing (terminal is final). A listing used to show an unreadable
 * status as `failed`/STATE_CORRUPT; the run's live runner then rewrote the file and the run ended `completed`, so a
 * client had seen a terminal state change. Expect: an unreadable status is listed `unreadable` (never a terminal
 * state) with STATE_CORRUPT, and the run's real end is the only terminal state any listing shows.
 * Also: `show r-` with more than one run is ambiguous, and says so, naming the candidates.
 */
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { cli } from '../cli/helpers.js';
import { FAKE, launchOk, until } from './fault-helpers.js';

const TERMINAL = ['completed', 'failed', 'cancelled'];

describe('F5 an unreadable status while the runner lives', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let env: Record<string, string>;
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'gate', { backend: 'command', command: ['node', FAKE, 'gate', path.join(t.base, 'go')] });
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    env = { SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root };
    s = await startServer(env);
  });
  afterEach(async () => {
    await s.close();
    t.cleanup();
  });

  it('is listed unreadable, never terminal; the run then ends as its runner records it', async () => {
    const runId = await launchOk(s, { agent: 'gate', task: 'the task' });
    const statusFile = path.join(t.home, 'runs', runId, 'status.json');
    expect(await until(() => { try { return JSON.parse(fs.readFileSync(statusFile, 'utf8')).steps[0].state === 'running'; } catch { return false; } }, 20_000)).toBe(true);
    fs.writeFileSync(statusFile, '{"state": "runn'); // torn

    const seen: string[] = [];
    const listed = async () => {
      const r = await s.call('status', {});
      expect(r.isError, textOf(r)).toBeFalsy();
      const row = (sc(r).runs as Array<{ runId: string; state: string; error: { code: string } | null }>).find((x) => x.runId === runId)!;
      seen.push(row.state);
      return row;
    };
    const damaged = await listed();
    expect(damaged.state).toBe('unreadable');
    expect(damaged.error?.code).toBe('STATE_CORRUPT');
    const runs = await cli(['runs', '--json'], env, { timeoutMs: 30_000 });
    const cliRow = (JSON.parse(runs.stdout).runs as Array<{ runId: string; state: string }>).find((x) => x.runId === runId)!;
    expect(TERMINAL).not.toContain(cliRow.state);

    fs.writeFileSync(path.join(t.base, 'go'), ''); // the agent answers; the runner repairs the file as it writes
    expect(await until(() => { try { return JSON.parse(fs.readFileSync(statusFile, 'utf8')).state === 'completed'; } catch { return false; } }, 30_000)).toBe(true);
    const fin = await waitTerminal(s, runId, 30_000);
    expect(fin.state).toBe('completed');
    await listed();
    expect(seen.filter((x) => TERMINAL.includes(x))).toEqual(['completed']);
  }, 60_000);

  it('`show r-` with two runs is ambiguous and names them', async () => {
    const a = await launchOk(s, { agent: 'echo', task: 'a' });
    const b = await launchOk(s, { agent: 'echo', task: 'b' });
    await waitTerminal(s, a);
    await waitTerminal(s, b);
    const r = await cli(['show', 'r-'], env, { timeoutMs: 30_000 });
    expect(r.code).not.toBe(0);
    expect(r.stderr).toContain('matches 2 runs');
    expect(r.stderr).toContain(a);
    expect(r.stderr).toContain(b);
    expect(r.stderr).not.toMatch(/no run/);
  }, 60_000);
});
