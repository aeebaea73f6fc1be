import { spawn, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { isAlive, readIdentity, readProcessInfo, selfIdentity, servesRun } from '../../src/process/identity.js';
import { findRunProcesses, signalVerified, terminateProcesses } from '../../src/process/terminate.js';

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
async function until(cond: () => boolean, maxMs = 10_000): Promise<boolean> {
  const end = performance.now() + maxMs;
  while (performance.now() < end) { if (cond()) return true; await sleep(20); }
  return cond();
}

const children: ChildProcess[] = [];
function start(args: string[], o: { detached?: boolean } = {}): ChildProcess {
  const c = spawn(args[0]!, args.slice(1), { stdio: ['ignore', 'pipe', 'ignore'], detached: o.detached ?? false });
  children.push(c);
  return c;
}
afterEach(() => {
  for (const c of children.splice(0)) {
    try { if (c.pid) process.kill(c.detached ? -c.pid : c.pid, 'SIGKILL'); } catch { /* gone */ }
  }
});

describe('process identity (pid + start time)', () => {
  it('knows this process and a child by pid and start time', async () => {
    const me = selfIdentity();
    expect(me.pid).toBe(process.pid);
    expect(me.startTime).not.toBe('unknown');
    expect(isAlive(me)).toBe(true);
    const c = start([process.execPath, '-e', 'setTimeout(() => {}, 30000)']);
    await new Promise((r) => c.once('spawn', r));
    const id = readIdentity(c.pid!)!;
    expect(id).not.toBeNull();
    expect(isAlive(id)).toBe(true);
    c.kill('SIGKILL');
    await new Promise((r) => c.once('exit', r));
    expect(await until(() => !isAlive(id))).toBe(true);
    expect(readIdentity(c.pid!)).toBeNull();
  });

  it('a reused pid (same pid, another start time) is not the recorded process', () => {
    const me = selfIdentity();
    expect(isAlive({ pid: me.pid, startTime: String(Number(me.startTime) + 1) })).toBe(false);
    expect(isAlive({ pid: me.pid, startTime: '0' })).toBe(false);
    expect(isAlive(null)).toBe(false);
    expect(isAlive({ pid: -1, startTime: me.startTime })).toBe(false);
  });

  it('parses a command name with spaces and parentheses (fields are read after the last ")")', async () => {
    const dir = fs.mkdtempSync('/tmp/sa-id-');
    const odd = `${dir}/we) ird (name`;
    fs.copyFileSync('/bin/sleep', odd);
    fs.chmodSync(odd, 0o755);
    try {
      const c = start([odd, '30']);
      await new Promise((r) => c.once('spawn', r));
      const info = readProcessInfo(c.pid!)!;
      expect(info.ppid).toBe(process.pid);
      expect(info.state).toMatch(/^[RSD]$/);
      expect(info.startTime).toMatch(/^\d+$/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a zombie is dead, although signal 0 still succeeds on it', async () => {
    // `sleep` never reaps: its background sibling becomes a zombie when it exits.
    const c = start(['sh', '-c', 'sleep 0.2 & echo $!; exec sleep 30']);
    const zpid = await new Promise<number>((resolve) => c.stdout!.once('data', (b: Buffer) => resolve(Number(String(b).trim()))));
    const id = { pid: zpid, startTime: readProcessInfo(zpid)!.startTime };
    expect(await until(() => readProcessInfo(zpid)?.state === 'Z')).toBe(true);
    expect(() => process.kill(zpid, 0)).not.toThrow();
    expect(isAlive(id)).toBe(false);
    expect(readIdentity(zpid)).toBeNull();
    expect(findRunProcesses({ pgids: [readProcessInfo(zpid)!.pgid] }).map((p) => p.pid)).not.toContain(zpid);
  });
});

describe('servesRun: whether a runner still works for a run', () => {
  it('a live runner serves the run its command line names, not another; a dead one serves none', async () => {
    const child = spawn(process.execPath, ['-e', 'setTimeout(() => {}, 60000)', '/state/runs/r-one'], { stdio: 'ignore' });
    try {
      await new Promise((r) => child.once('spawn', r));
      const id = readIdentity(child.pid!)!;
      expect(servesRun(id, '/state/runs/r-one')).toBe(true);
      expect(servesRun(id, '/state/runs/r-two')).toBe(false);
      child.kill('SIGKILL');
      await new Promise((r) => child.once('exit', r));
      expect(servesRun(id, '/state/runs/r-one')).toBe(false);
    } finally {
      child.kill('SIGKILL');
    }
  });

  it.skipIf(process.platform !== 'linux')('a live process whose command line is empty (one on its way out) still counts until it is gone', () => {
    // kthreadd (pid 2) is alive with an empty command line, as an exiting process is once its memory is released.
    const kthreadd = readIdentity(2);
    if (!kthreadd || fs.readFileSync('/proc/2/cmdline', 'latin1') !== '') return; // not visible here (a pid namespace)
    expect(servesRun(kthreadd, '/state/runs/r-one')).toBe(true);
  });
});

describe('signalling only verified processes', () => {
  it('signalVerified refuses a pid whose start time differs (never signals a stranger)', async () => {
    const c = start([process.execPath, '-e', 'setTimeout(() => {}, 30000)']);
    await new Promise((r) => c.once('spawn', r));
    const info = readProcessInfo(c.pid!)!;
    expect(signalVerified({ ...info, startTime: '1' }, 'SIGKILL')).toBe(false);
    await sleep(100);
    expect(isAlive(info)).toBe(true);
    expect(signalVerified(info, 'SIGKILL')).toBe(true);
    expect(await until(() => !isAlive(info))).toBe(true);
  });

  it('terminateProcesses: SIGTERM, then SIGKILL after the grace for what ignores it; a whole group, verified gone', async () => {
    // Parent and child both ignore SIGTERM; each says "up" once its handler is in place.
    const body = "process.on('SIGTERM', () => {}); require('child_process').spawn(process.execPath, ['-e', \"process.on('SIGTERM', () => {}); console.log('up'); setTimeout(() => {}, 30000)\"], { stdio: 'inherit' }); console.log('up'); setTimeout(() => {}, 30000)";
    const c = start([process.execPath, '-e', body], { detached: true });
    let out = '';
    c.stdout!.on('data', (b: Buffer) => { out += String(b); });
    expect(await until(() => out.split('up').length - 1 === 2)).toBe(true);
    const pgid = c.pid!;
    expect(await until(() => findRunProcesses({ pgids: [pgid] }).length === 2)).toBe(true);
    const r = await terminateProcesses(() => findRunProcesses({ pgids: [pgid] }), 200);
    expect(r.survivors).toEqual([]);
    expect(r.signalled).toBeGreaterThanOrEqual(4); // two SIGTERMs, two SIGKILLs
    expect(findRunProcesses({ pgids: [pgid] })).toEqual([]);
    expect(await new Promise((res) => { if (c.exitCode !== null || c.signalCode !== null) res(c.signalCode); else c.once('exit', (_c, s) => res(s)); })).toBe('SIGKILL');
  });
});
