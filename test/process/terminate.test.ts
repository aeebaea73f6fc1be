import { spawn } from 'node:child_process';
import { afterEach, describe, expect, it } from 'vitest';
import { readIdentity } from '../../src/process/identity.js';
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
});
