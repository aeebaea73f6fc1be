/**
 * Temp files of writers that died mid-write do not outlive the run. Servers write into a live run's directory (a
 * cancel request, an append), and one killed between its temp file and the rename leaves the temp behind: the runner
 * removes those of dead writers when the run ends, and reconciliation does when it ends a lost run. A live writer's
 * temp is never touched.
 */
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FIXTURE_AGENTS } from '../helpers/paths.js';
import { ok, until, waitStatus } from '../helpers/runs.js';
import { startServer, waitTerminal, type Started } from '../helpers/server.js';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';

const FAKE = path.join(FIXTURE_AGENTS, 'fake-agent.mjs');

/** A pid that belonged to a process which has exited (and was reaped): a writer proven gone. */
function deadPid(): number {
  const r = spawnSync('true');
  if (!r.pid) throw new Error('could not start `true`');
  return r.pid;
}

describe('temp files of dead writers in a run directory', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  beforeAll(async () => {
    t = tempStateHome('sa-temps-');
    writeAgent(path.join(t.home, 'agents'), 'gate', { backend: 'command', command: ['node', FAKE, 'gate', path.join(t.base, 'open')] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root });
  });
  afterAll(async () => {
    await s?.close();
    t?.cleanup();
  });

  /** Plants a dead writer's temps (top level and in appends/) and a live writer's one in a running run's directory. */
  function plant(runDir: string): { dead: string[]; live: string } {
    const pid = deadPid();
    const dead = [
      path.join(runDir, `.cancel-request.json.${pid}.1a2b.tmp`),
      path.join(runDir, 'appends', `.000007.json.${pid}.3c.tmp`),
    ];
    const live = path.join(runDir, `.cancel-request.json.${process.pid}.4d.tmp`);
    fs.mkdirSync(path.join(runDir, 'appends'), { recursive: true, mode: 0o700 }); // as a run's first append makes it
    for (const f of [...dead, live]) fs.writeFileSync(f, '{"half":', { mode: 0o600 });
    return { dead, live };
  }

  it('the runner removes them when its run ends, and leaves a live writer\'s', async () => {
    const l = await ok(s, 'launch', { agent: 'gate', task: 'x' });
    const runDir = path.join(t.home, 'runs', l.runId);
    await waitStatus(s, l.runId, (v) => v.steps[0]?.state === 'running');
    const { dead, live } = plant(runDir);
    fs.writeFileSync(path.join(t.base, 'open'), '');
    expect((await waitTerminal(s, l.runId)).state).toBe('completed');
    // The runner's last act, after the terminal status: wait for its exit.
    const runnerPid = JSON.parse(fs.readFileSync(path.join(runDir, 'status.json'), 'utf8')).runner.pid as number;
    expect(await until(() => !fs.existsSync(`/proc/${runnerPid}`), 10_000)).toBe(true);
    for (const f of dead) expect(fs.existsSync(f), f).toBe(false);
    expect(fs.existsSync(live)).toBe(true);
    fs.unlinkSync(live);
    fs.unlinkSync(path.join(t.base, 'open'));
  });

  it('reconciliation removes them when it ends a run whose runner was lost', async () => {
    const l = await ok(s, 'launch', { agent: 'gate', task: 'x' });
    const runDir = path.join(t.home, 'runs', l.runId);
    const running = await waitStatus(s, l.runId, (v) => v.steps[0]?.state === 'running');
    const { dead, live } = plant(runDir);
    const runnerPid = JSON.parse(fs.readFileSync(path.join(runDir, 'status.json'), 'utf8')).runner.pid as number;
    expect(running.state).toBe('running');
    process.kill(runnerPid, 'SIGKILL');
    const end = await waitTerminal(s, l.runId);
    expect(end.state).toBe('failed');
    expect(end.error?.code).toBe('RUNNER_LOST');
    for (const f of dead) expect(fs.existsSync(f), f).toBe(false);
    expect(fs.existsSync(live)).toBe(true);
    fs.unlinkSync(live);
  });
});
