import { spawn, spawnSync } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { hasEnvEntry, listProcesses, readIdentity } from '../../src/process/identity.js';
import { findRunProcesses } from '../../src/process/terminate.js';

describe.skipIf(process.platform !== 'linux')('findRunProcesses', () => {
  const started: number[] = [];
  afterEach(() => { for (const pid of started.splice(0)) try { process.kill(-pid, 'SIGKILL'); } catch { /* gone */ } });

  it('finds a token carrier outside the run\'s groups, unless it started before the runner it is said to descend from', async () => {
    const token = `t-${process.pid}-${Date.now()}`;
    // Its own group (detached): found by its token alone.
    const carrier = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env: { SUBAGENTS_RUN_TOKEN: token } });
    started.push(carrier.pid!);
    let id = readIdentity(carrier.pid!);
    for (let i = 0; i < 100 && !id; i++) { await new Promise((r) => setTimeout(r, 10)); id = readIdentity(carrier.pid!); }
    expect(id).not.toBeNull();
    const pids = (since?: string) => findRunProcesses({ pgids: [], token, since }).map((p) => p.pid);
    expect(pids()).toEqual([carrier.pid]);
    expect(pids(id!.startTime)).toEqual([carrier.pid]); // started with the runner (same tick): may descend from it
    expect(pids(String(Number(id!.startTime) - 1))).toEqual([carrier.pid]);
    expect(pids(String(Number(id!.startTime) + 1))).toEqual([]); // older than the runner: not its descendant, not read
    expect(findRunProcesses({ pgids: [], token: `${token}-other` }).map((p) => p.pid)).toEqual([]);
  });

  it('finds a group member whose parent is gone (an orphaned grandchild) and a carrier that left the group, never a zombie', async () => {
    const token = `t-${process.pid}-${Date.now()}-tree`;
    // A detached "runner" (its own group): its child forks a sleeping grandchild and exits, so the grandchild is
    // re-parented away but stays in the group; a second grandchild leaves the group (setsid) keeping the token; a
    // third exits and stays a zombie of the never-reaping `sleep` that execs last.
    const script = [
      '(sleep 30 &) ; (setsid sleep 30 &) ;',
      'sleep 0.1 &',
      'exec sleep 30',
    ].join(' ');
    const runner = spawn('sh', ['-c', script], { detached: true, stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, SUBAGENTS_RUN_TOKEN: token } });
    started.push(runner.pid!);
    const pgid = runner.pid!;
    const found = () => findRunProcesses({ pgids: [pgid], token, since: readIdentity(pgid)?.startTime });
    // Settled: the runner itself and the orphan in its group (the subshells gone, the short sleep a zombie), and the
    // carrier in a session of its own.
    const byPgid = (p: { pgid: number }) => p.pgid === pgid;
    const zombie = () => listProcesses().some((p) => p.pgid === pgid && p.state === 'Z');
    const settled = (l: ReturnType<typeof found>) => l.filter(byPgid).length === 2 && l.some((p) => !byPgid(p)) && zombie();
    let list = found();
    for (let i = 0; i < 500 && !settled(list); i++) { await new Promise((r) => setTimeout(r, 10)); list = found(); }
    expect(zombie()).toBe(true);
    expect(list.filter(byPgid).length).toBe(2);
    const carrier = list.find((p) => !byPgid(p));
    expect(carrier).toBeDefined();
    expect(hasEnvEntry(carrier!.pid, `SUBAGENTS_RUN_TOKEN=${token}`)).toBe(true);
    expect(list.every((p) => p.state !== 'Z')).toBe(true);
    const orphan = list.find((p) => byPgid(p) && p.pid !== pgid)!;
    expect(orphan.ppid).not.toBe(pgid);
    try { process.kill(carrier!.pid, 'SIGKILL'); } catch { /* gone */ }
  });

  it('matches a whole environment entry only (not a prefix, a suffix or a longer value)', () => {
    const token = `t-${process.pid}-${Date.now()}-env`;
    const entry = `SUBAGENTS_RUN_TOKEN=${token}`;
    const env = { FIRST: '1', SUBAGENTS_RUN_TOKEN: token, LAST: 'x' };
    const c = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env });
    started.push(c.pid!);
    const only = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env: { SUBAGENTS_RUN_TOKEN: token } });
    started.push(only.pid!);
    const longer = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env: { SUBAGENTS_RUN_TOKEN: `${token}x`, X_SUBAGENTS_RUN_TOKEN: token } });
    started.push(longer.pid!);
    const until = (f: () => boolean) => { for (let i = 0; i < 500 && !f(); i++) spawnSync('sleep', ['0.01']); return f(); };
    expect(until(() => hasEnvEntry(c.pid!, entry))).toBe(true);
    expect(until(() => hasEnvEntry(only.pid!, entry))).toBe(true);
    expect(until(() => hasEnvEntry(longer.pid!, `SUBAGENTS_RUN_TOKEN=${token}x`))).toBe(true);
    expect(hasEnvEntry(longer.pid!, entry)).toBe(false);
    expect(hasEnvEntry(c.pid!, 'FIRST=')).toBe(false);
    expect(hasEnvEntry(c.pid!, 'FIRST=1')).toBe(true);
    expect(hasEnvEntry(c.pid!, 'LAST=x')).toBe(true);
    expect(hasEnvEntry(c.pid!, `RUN_TOKEN=${token}`)).toBe(false);
  });
});
