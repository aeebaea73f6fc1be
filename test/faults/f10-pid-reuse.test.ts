/**
 * F10 — pid reuse. A run whose recorded runner pid now belongs to an unrelated process (same pid, another start
 * time) is treated as dead: reconciliation ends it failed/RUNNER_LOST, returns its capacity slot, and never signals
 * the unrelated process — nor the process group that process leads (a reused pid's group is not the run's group).
 *
 * How: a real run completes; its status.json is then rewritten to `running` with `runner: { pid: <a detached sleep
 * we started>, startTime: 'bogus' }` and a bound capacity reservation for it, as if the runner had died and its pid
 * had been recycled. The sleep is detached, so it leads its own group: the harmful case for a group-wide kill.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { tempStateHome, writeAgent } from '../helpers/state-home.js';
import { sc, startServer, textOf, waitTerminal, type Started } from '../helpers/server.js';
import { FAKE, pidAlive, readStatusFile } from './fault-helpers.js';

describe('F10 pid reuse', () => {
  let t: ReturnType<typeof tempStateHome>;
  let s: Started;
  const strangers: ChildProcess[] = [];
  beforeEach(async () => {
    t = tempStateHome();
    writeAgent(path.join(t.home, 'agents'), 'echo', { backend: 'command', command: ['node', FAKE, 'echo'] });
    s = await startServer({ SUBAGENTS_HOME: t.home, SUBAGENTS_ROOTS: t.root, SUBAGENTS_KILL_GRACE_MS: '300' });
  });
  afterEach(async () => {
    for (const c of strangers.splice(0)) { try { process.kill(-c.pid!, 'SIGKILL'); } catch { /* gone */ } }
    await s.close();
    t.cleanup();
  });

  /** An unrelated process: a group leader (detached) with a child in its group. */
  function stranger(): { leader: ChildProcess; childPid: () => number | null } {
    const leader = spawn('sh', ['-c', 'sleep 60 & echo $!; wait'], { detached: true, stdio: ['ignore', 'pipe', 'ignore'] });
    strangers.push(leader);
    let child: number | null = null;
    leader.stdout!.on('data', (b: Buffer) => { child = Number(b.toString().trim()); });
    return { leader, childPid: () => child };
  }

  it('treats a recycled runner pid as dead and never signals the process (or group) now owning it', async () => {
    const l = sc(await s.call('launch', { agent: 'echo', task: 'done before the fault' }));
    const fin = await waitTerminal(s, l.runId);
    expect(fin.state).toBe('completed');

    const { leader, childPid } = stranger();
    for (let i = 0; i < 100 && childPid() === null; i++) await new Promise((r) => setTimeout(r, 20));
    expect(childPid()).not.toBeNull();

    // The runner "died" mid-run and the kernel gave its pid to the stranger.
    const file = path.join(t.home, 'runs', l.runId, 'status.json');
    const st = readStatusFile(t.home, l.runId);
    st.state = 'running';
    st.endedAt = null;
    st.error = null;
    st.runner = { pid: leader.pid, startTime: 'bogus' };
    fs.writeFileSync(file, JSON.stringify(st));
    const ledgerFile = path.join(t.home, 'ledger.json');
    const ledger = JSON.parse(fs.readFileSync(ledgerFile, 'utf8'));
    ledger.roots[l.runId] = { at: new Date().toISOString(), server: { pid: leader.pid, startTime: 'bogus' }, runner: { pid: leader.pid, startTime: 'bogus' } };
    fs.writeFileSync(ledgerFile, JSON.stringify(ledger));

    const r = await s.call('status', { runId: l.runId });
    expect(r.isError, textOf(r)).toBeFalsy();
    const v = sc(r);
    expect(v.state).toBe('failed');
    expect(v.error.code).toBe('RUNNER_LOST');
    expect(v.survivors).toBeUndefined();

    // Never signalled: the stranger and its group are all still alive after the kill grace has long passed.
    await new Promise((r2) => setTimeout(r2, 800));
    expect(pidAlive(leader.pid!)).toBe(true);
    expect(pidAlive(childPid()!)).toBe(true);
    expect(leader.exitCode).toBeNull();
    expect(leader.signalCode).toBeNull();

    // The slot came back: a reused pid's group does not keep the reservation alive.
    const after = JSON.parse(fs.readFileSync(ledgerFile, 'utf8'));
    expect(after.roots[l.runId]).toBeUndefined();
    const list = sc(await s.call('status', {}));
    expect(list.capacity.active).toBe(0);
  });

  it('a reservation bound to a recycled runner pid is reclaimed by the next launch, and the stranger lives', async () => {
    const { leader } = stranger();
    await new Promise((r) => setTimeout(r, 100));
    const ledgerFile = path.join(t.home, 'ledger.json');
    const ledger = fs.existsSync(ledgerFile) ? JSON.parse(fs.readFileSync(ledgerFile, 'utf8')) : { v: 1, roots: {}, trees: {}, agents: {} };
    const ghost = 'r-AAAAAAAAAAAAAAAAAAAAAAAA';
    ledger.roots[ghost] = { at: new Date().toISOString(), server: { pid: leader.pid, startTime: 'bogus' }, runner: { pid: leader.pid, startTime: 'bogus' } };
    fs.writeFileSync(ledgerFile, JSON.stringify(ledger));
    const l = sc(await s.call('launch', { agent: 'echo', task: 'x' }));
    expect(l.capacity.active).toBe(1); // the ghost's slot was pruned, only this run counts
    await waitTerminal(s, l.runId);
    expect(pidAlive(leader.pid!)).toBe(true);
  });
});
