import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { CAT, procIdentity, stillAlive, waitStatus, ok } from '../helpers/runs.js';
import { startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

describe('a runner SIGKILLed in the middle of a chain', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  let markers: string;
  beforeAll(async () => {
    t = tempStateHome('sa-lost-');
    markers = path.join(t.base, 'markers');
    fs.mkdirSync(markers);
    const dir = path.join(t.home, 'agents');
    writeAgent(dir, 'echo', { backend: 'command', command: [CAT] });
    writeAgent(dir, 'sleeper', { backend: 'command', command: ['node', FAKE, 'sleep', '60000'] });
    // Exits at once, leaving a grandchild behind in the runner's process group (its pid in the marker dir).
    writeAgent(dir, 'forker', { backend: 'command', command: ['node', FAKE, 'fork', '60000'], env: ['FAKE_MARKER_DIR'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300', FAKE_MARKER_DIR: markers });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  it('ends RUNNER_LOST with every member process (and the grandchild) gone, and the later steps skipped', async () => {
    const l = await ok(s, 'launch', {
      chain: [
        { agent: 'echo', task: 'first' },
        { parallel: [{ agent: 'sleeper', task: 'a' }, { agent: 'forker', task: 'b' }, { agent: 'sleeper', task: 'c' }] },
        { agent: 'echo', task: 'never {previous}' },
      ],
    });
    const runId = l.runId as string;
    await ok(s, 'append', { runId, step: { agent: 'echo', task: 'appended' } });
    const live = await waitStatus(s, runId, (v) => {
      const m = v.steps[1]?.members ?? [];
      return m[0]?.pid && m[2]?.pid && m[1]?.state === 'completed' && fs.existsSync(path.join(markers, 'grandchild.pid'));
    });
    const grandchild = Number(fs.readFileSync(path.join(markers, 'grandchild.pid'), 'utf8'));
    const ids = [live.steps[1].members[0].pid, live.steps[1].members[2].pid, grandchild].map((pid: number) => procIdentity(pid));
    expect(ids.every((id) => id !== null)).toBe(true);
    const runner = procIdentity(live.runnerPid)!;
    expect(runner).not.toBeNull();

    process.kill(runner.pid, 'SIGKILL');
    const fin = await waitTerminal(s, runId);
    expect(fin.state).toBe('failed');
    expect(fin.error.code).toBe('RUNNER_LOST');
    expect(fin.error.message).toContain(String(runner.pid));
    expect(fin.steps.map((x: any) => x.state)).toEqual(['completed', 'failed', 'skipped', 'skipped']);
    expect(fin.steps[1].members.map((m: any) => m.state)).toEqual(['failed', 'completed', 'failed']);
    expect(fin.pendingAppends).toBe(0);
    expect(stillAlive(runner)).toBe(false);
    for (const id of ids) expect(stillAlive(id!), `pid ${id!.pid}`).toBe(false);
    // Terminal is final: asking again changes nothing.
    const again = (await ok(s, 'status', { runId }));
    expect(again.state).toBe('failed');
    expect(again.error.code).toBe('RUNNER_LOST');
  });
});
