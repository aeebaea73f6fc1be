import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { readIdentity } from '../../src/process/identity.js';
import { pidMark, pidsSince, pidWindow, type PidMark } from '../../src/process/pid-window.js';
import { findRunProcesses } from '../../src/process/terminate.js';

const mark = (lastPid: number, forks: number, tasks = 100): PidMark => ({ lastPid, forks, tasks });

describe('pidWindow', () => {
  it('admits the pids after the mark up to the last one given out, and nothing else', () => {
    const w = pidWindow(mark(1000, 50), mark(1010, 55), 32768)!;
    expect(w(1000)).toBe(false);
    expect([1001, 1005, 1010].map(w)).toEqual([true, true, true]);
    expect([999, 1011, 300, 32767].map(w)).toEqual([false, false, false, false]);
  });

  it('admits both ends of a window that wrapped past pid_max', () => {
    const w = pidWindow(mark(32760, 50), mark(305, 70), 32768)!;
    expect([32761, 32767, 300, 305].map(w)).toEqual([true, true, true, true]);
    expect([32760, 306, 1000].map(w)).toEqual([false, false, false]);
  });

  it('gives up when the allocator may have gone all the way round, or the counters went back', () => {
    // created + 3 × (tasks + created) must stay below pid_max − 300.
    expect(pidWindow(mark(1000, 0, 100), mark(1100, 8100, 100), 32768)).toBeNull();
    expect(pidWindow(mark(1000, 0, 100), mark(1100, 8100, 100), 4_194_304)).not.toBeNull();
    expect(pidWindow(mark(1000, 0, 11000), mark(1100, 10, 100), 32768)).toBeNull(); // many tasks then: many pids skipped
    expect(pidWindow(mark(1000, 50), mark(1100, 40), 32768)).toBeNull(); // another boot's counters
  });
});

describe.skipIf(process.platform !== 'linux')('pidsSince and the sweep it narrows', () => {
  const started: number[] = [];
  afterEach(() => { for (const pid of started.splice(0)) try { process.kill(-pid, 'SIGKILL'); } catch { /* gone */ } });

  const until = async <T>(f: () => T | null): Promise<T> => {
    for (let i = 0; i < 500; i++) {
      const v = f();
      if (v) return v;
      await new Promise((r) => setTimeout(r, 10));
    }
    throw new Error('timed out');
  };

  it('admits a process started after the mark (in a session of its own) and not one started before', async () => {
    const token = `t-${process.pid}-${Date.now()}-window`;
    const before = spawn('sleep', ['30'], { detached: true, stdio: 'ignore', env: { SUBAGENTS_RUN_TOKEN: token } });
    started.push(before.pid!);
    await until(() => readIdentity(before.pid!));
    const m = pidMark();
    expect(m).not.toBeNull();
    // A "runner" group whose child leaves it (setsid) carrying the token: found by the token alone.
    const runner = spawn('sh', ['-c', '(setsid sleep 30 &) ; exec sleep 30'], { detached: true, stdio: 'ignore', env: { ...process.env, SUBAGENTS_RUN_TOKEN: token } });
    started.push(runner.pid!);
    const window = pidsSince(m!);
    expect(window).not.toBeNull();
    expect(window!(runner.pid!)).toBe(true);
    expect(window!(before.pid!)).toBe(false);
    // The narrowed scan finds what the whole scan finds among processes started since: the runner, and the carrier
    // that left its group; the carrier started before the mark is not looked at.
    const narrowed = () => findRunProcesses({ pgids: [runner.pid!], token, pids: () => pidsSince(m!) });
    // Settled: the subshell that started the carrier has exited, `sh` has exec'd its sleep.
    const found = await until(() => { const l = narrowed(); return l.length === 2 && l.some((p) => p.pgid !== runner.pid) ? l : null; });
    const escaped = found.find((p) => p.pgid !== runner.pid)!;
    started.push(escaped.pid);
    expect(found.map((p) => p.pid)).toContain(runner.pid);
    const whole = findRunProcesses({ pgids: [runner.pid!], token }).map((p) => p.pid).sort();
    expect(whole).toEqual([before.pid!, runner.pid!, escaped.pid].sort());
    // A pid named in `known` is looked at even outside the window.
    expect(findRunProcesses({ pgids: [], token, pids: () => pidsSince(m!), known: [before.pid!] }).map((p) => p.pid)).toContain(before.pid);
  });
});
