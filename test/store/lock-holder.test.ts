import { spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { REPO } from '../helpers/paths.js';
import { isAlive, pidIsFree, selfIdentity } from '../../src/process/identity.js';
import { clearDeadHolder, lockDirOf, makeLockDir, readHolder, removeLockDir, takeFreeLock } from '../../src/store/lock-dir.js';
import { deferredFreesSettled } from '../../src/store/deferred-free.js';
import { configureLocks, withLock } from '../../src/store/lock.js';

/**
 * A lock names its holder (pid + start time): a holder SIGKILLed inside its section is cleared by the next process at
 * once, well inside a lock wait shorter than the stale time; a live holder's lock is never taken.
 */
const DIST = path.join(REPO, 'dist');

/** A real process that takes the lock on `target` and, inside the section, is SIGKILLed or prints `held` and waits. */
function holder(target: string, mode: 'die' | 'hold') {
  const script = `
    const { configureLocks, withLock } = await import(${JSON.stringify(path.join(DIST, 'store', 'lock.js'))});
    const { isAlive, selfIdentity } = await import(${JSON.stringify(path.join(DIST, 'process', 'identity.js'))});
    configureLocks({ self: selfIdentity(), isAlive });
    await withLock(${JSON.stringify(target)}, () => { process.stdout.write('held\\n'); setInterval(() => {}, 60_000); return new Promise(() => {}); });`;
  const env = { ...process.env, SUBAGENTS_TEST_FAULT: mode === 'die' ? `kill-in-lock:${path.basename(target)}` : '' };
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { env, stdio: ['ignore', 'pipe', 'inherit'] });
  const held = new Promise<void>((resolve) => child.stdout.on('data', () => resolve()));
  const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_c, signal) => resolve(signal)));
  return { child, held, exited };
}

describe('a lock names its holder', () => {
  let dir: string;
  beforeAll(() => {
    dir = fs.mkdtempSync(path.join(os.tmpdir(), 'lock-holder-'));
    configureLocks({ self: selfIdentity(), isAlive, pidFree: pidIsFree });
  });
  afterAll(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('a holder SIGKILLed inside its section: the next taker clears the lock at once (no BUSY within a short wait)', async () => {
    const target = path.join(dir, 'ledger.json');
    const h = holder(target, 'die');
    expect(await h.exited).toBe('SIGKILL');
    expect(fs.existsSync(lockDirOf(target))).toBe(true); // left behind, naming a dead holder
    // A wait far below the 5 s stale time: only the dead-holder check can free it in time.
    await expect(withLock(target, () => 'ran', { waitMs: 300, staleMs: 60_000 })).resolves.toBe('ran');
    expect(fs.existsSync(lockDirOf(target))).toBe(false);
  }, 30_000);

  it("a dead holder's temps beside the locked file go with its lock; a live process's, and its pid reused, stay", async () => {
    const sub = path.join(dir, 'temps');
    fs.mkdirSync(path.join(sub, 'nested'), { recursive: true });
    const target = path.join(sub, 'ledger.json');
    const h = holder(target, 'die');
    expect(await h.exited).toBe('SIGKILL');
    const dead = h.child.pid!;
    // What a SIGKILL inside the section leaves (writeFileAtomic's temp, its rename never made), and what must stay:
    // this live process's temp of the same file, and the dead pid's name one directory down (not beside the file).
    const deadTemp = path.join(sub, `.ledger.json.${dead}.1f.tmp`);
    const liveTemp = path.join(sub, `.ledger.json.${process.pid}.2e.tmp`);
    const nested = path.join(sub, 'nested', `.status.json.${dead}.3d.tmp`);
    for (const f of [deadTemp, liveTemp, nested]) fs.writeFileSync(f, '{');
    // Its pid taken by another process meanwhile: nothing named with it is removed.
    configureLocks({ self: selfIdentity(), isAlive, pidFree: () => false });
    try {
      await expect(withLock(target, () => 'ran', { waitMs: 300, staleMs: 60_000 })).resolves.toBe('ran');
    } finally {
      configureLocks({ self: selfIdentity(), isAlive, pidFree: pidIsFree });
    }
    expect(fs.existsSync(deadTemp)).toBe(true);
    // Dead again, and its pid nobody's: its temp beside the locked file goes as its lock is cleared.
    const again = holder(target, 'die');
    expect(await again.exited).toBe('SIGKILL');
    const deadAgain = path.join(sub, `.ledger.json.${again.child.pid!}.4c.tmp`);
    fs.writeFileSync(deadAgain, '{');
    expect(pidIsFree({ pid: again.child.pid!, startTime: 'x' })).toBe(true);
    await expect(withLock(target, () => 'ran', { waitMs: 300, staleMs: 60_000 })).resolves.toBe('ran');
    expect(fs.existsSync(deadAgain)).toBe(false);
    expect(fs.existsSync(liveTemp)).toBe(true);
    expect(fs.existsSync(path.join(sub, 'nested', `.status.json.${dead}.3d.tmp`))).toBe(true);
  }, 30_000);

  it("a live holder's lock is never taken: BUSY, and the lock stays", async () => {
    const target = path.join(dir, 'run');
    const h = holder(target, 'hold');
    try {
      await h.held;
      await expect(withLock(target, () => 'ran', { waitMs: 300, staleMs: 60_000 })).rejects.toMatchObject({ code: 'BUSY' });
      expect(clearDeadHolder(lockDirOf(target), isAlive)).toBe(false);
      expect(fs.existsSync(lockDirOf(target))).toBe(true);
    } finally {
      h.child.kill('SIGKILL');
      await h.exited;
    }
    // Now dead: cleared at once.
    await expect(withLock(target, () => 'ran', { waitMs: 300, staleMs: 60_000 })).resolves.toBe('ran');
  }, 30_000);

  it('two clearers of one dead holder: exactly one wins, and a lock taken again since is not cleared', async () => {
    const target = path.join(dir, 'session');
    const h = holder(target, 'die');
    await h.exited;
    const lock = lockDirOf(target);
    expect([clearDeadHolder(lock, isAlive), clearDeadHolder(lock, isAlive)].filter(Boolean)).toHaveLength(1);
    makeLockDir(lock, selfIdentity()); // re-taken by a live holder
    expect(clearDeadHolder(lock, isAlive)).toBe(false);
    expect(fs.existsSync(lock)).toBe(true);
  }, 30_000);

  it('a free lock is taken at once with its holder entry, and released whole', async () => {
    const target = path.join(dir, 'free');
    const seen = await withLock(target, () => {
      const lock = lockDirOf(target);
      const names = fs.readdirSync(lock);
      return { names, holder: readHolder(path.join(lock, names[0]!)) };
    });
    expect(seen.names).toHaveLength(1);
    expect(seen.holder).toMatchObject({ pid: process.pid, startTime: selfIdentity().startTime, host: os.hostname() });
    expect(fs.existsSync(lockDirOf(target))).toBe(false);
    await deferredFreesSettled();
  });

  it('a lock held past half its stale time has its mtime refreshed, so nobody takes it over', async () => {
    const target = path.join(dir, 'long');
    const lock = lockDirOf(target);
    const release = takeFreeLock(target, selfIdentity(), 2000)!; // refreshed every second
    try {
      const old = new Date(Date.now() - 60_000);
      fs.utimesSync(lock, old, old);
      const deadline = Date.now() + 20_000;
      while (fs.statSync(lock).mtimeMs < Date.now() - 30_000 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      expect(fs.statSync(lock).mtimeMs).toBeGreaterThan(Date.now() - 30_000);
      // A waiter with that stale time finds it fresh and held.
      await expect(withLock(target, () => 'ran', { waitMs: 200, staleMs: 2000 })).rejects.toMatchObject({ code: 'BUSY' });
    } finally {
      release();
    }
    expect(fs.existsSync(lock)).toBe(false);
  }, 30_000);

  it('a release after a take-over leaves the new holder\'s lock in place', () => {
    const target = path.join(dir, 'taken-over');
    const lock = lockDirOf(target);
    const release = takeFreeLock(target, selfIdentity(), 5000)!;
    // Taken over as stale by another process: our entry and directory removed, the lock made again with its holder.
    for (const n of fs.readdirSync(lock)) fs.unlinkSync(path.join(lock, n));
    fs.rmdirSync(lock);
    fs.mkdirSync(lock);
    fs.symlinkSync(JSON.stringify({ pid: 1, startTime: '1', host: os.hostname() }), path.join(lock, 'holder-other'));
    release();
    expect(fs.readdirSync(lock)).toEqual(['holder-other']);
    fs.unlinkSync(path.join(lock, 'holder-other'));
    fs.rmdirSync(lock);
  });

  it('a lock without a holder (unknown identity) is left to the stale time', () => {
    const lock = lockDirOf(path.join(dir, 'anon'));
    makeLockDir(lock, null);
    expect(clearDeadHolder(lock, isAlive)).toBe(false);
    expect(fs.existsSync(lock)).toBe(true);
  });

  it('the holder is a symlink read without following it; a regular holder file (an earlier version) is read too', () => {
    const lock = lockDirOf(path.join(dir, 'kinds'));
    makeLockDir(lock, selfIdentity());
    const [name] = fs.readdirSync(lock);
    const entry = path.join(lock, name!);
    expect(fs.lstatSync(entry).isSymbolicLink()).toBe(true);
    expect(readHolder(entry)).toMatchObject({ pid: process.pid, startTime: selfIdentity().startTime, host: os.hostname() });
    removeLockDir(lock); // this process's own release: its entry by name, then the directory
    expect(fs.existsSync(lock)).toBe(false);
    // An earlier version's holder file naming a dead process: cleared like a symlink holder.
    fs.mkdirSync(lock);
    fs.writeFileSync(path.join(lock, 'holder-old.json'), JSON.stringify({ pid: process.pid, startTime: '1', host: os.hostname() }));
    expect(clearDeadHolder(lock, isAlive)).toBe(true);
    expect(fs.existsSync(lock)).toBe(false);
  });
});
