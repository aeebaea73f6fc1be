import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { beginDurableReplace, createFileExclusive, ensureDurablePrivateDir, ensurePrivateDir, removeStaleTemps, tempNameFor, writeFileAtomic, writeNewFile } from '../../src/store/atomic-write.js';
import { overrideFsPort } from '../../src/store/fs-port.js';
import { deferredFreesSettled } from '../../src/store/deferred-free.js';

const errno = (code: string) => Object.assign(new Error(`${code}: injected`), { code });

describe('writeFileAtomic', () => {
  let dir: string;
  let restore: (() => void) | undefined;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-aw-')); });
  afterEach(() => {
    restore?.();
    restore = undefined;
    fs.rmSync(dir, { recursive: true, force: true });
  });
  const leftovers = () => fs.readdirSync(dir).filter((n) => n.endsWith('.tmp'));

  it('replaces the file whole, 0600, leaving no temp file', () => {
    const f = path.join(dir, 'status.json');
    writeFileAtomic(f, '{"a":1}');
    writeFileAtomic(f, '{"a":2}', { durable: false });
    expect(fs.readFileSync(f, 'utf8')).toBe('{"a":2}');
    expect(fs.statSync(f).mode & 0o777).toBe(0o600);
    expect(leftovers()).toEqual([]);
  });

  it('the file it replaces is freed off the caller\'s thread, and no descriptor is left once that is done', async () => {
    const f = path.join(dir, 'status.json');
    const fds = () => fs.readdirSync('/proc/self/fd').length;
    writeFileAtomic(f, 'old '.repeat(1000));
    await deferredFreesSettled();
    const before = fds();
    const link = path.join(dir, 'old-name');
    fs.linkSync(f, link); // the replaced inode, still reachable: its content must be the old one, untouched
    writeFileAtomic(f, 'new', { durable: false });
    writeFileAtomic(f, 'newer', { durable: true });
    expect(fs.readFileSync(f, 'utf8')).toBe('newer');
    expect(fs.readFileSync(link, 'utf8')).toBe('old '.repeat(1000));
    await deferredFreesSettled();
    expect(fds()).toBe(before);
    expect(leftovers()).toEqual([]);
  });

  it('names temps so that the sweep of a dead writer\'s leftovers recognises them', () => {
    const names = Array.from({ length: 50 }, () => tempNameFor(path.join(dir, 'status.json')));
    expect(new Set(names).size).toBe(50);
    for (const n of names) fs.writeFileSync(n, 'partial');
    fs.writeFileSync(path.join(dir, 'status.json'), '{}');
    expect(removeStaleTemps(dir, process.pid)).toBe(50);
    expect(fs.readdirSync(dir)).toEqual(['status.json']);
  });

  it.each(['openSync', 'writeSync', 'fsyncSync', 'renameSync'] as const)('a failing %s leaves the old content and no temp file', (call) => {
    const f = path.join(dir, 'status.json');
    writeFileAtomic(f, 'old');
    restore = overrideFsPort({ [call]: () => { throw errno('ENOSPC'); } });
    expect(() => writeFileAtomic(f, 'new')).toThrow(/ENOSPC/);
    restore();
    restore = undefined;
    expect(fs.readFileSync(f, 'utf8')).toBe('old');
    expect(leftovers()).toEqual([]);
  });

  it('a short write is continued, not truncated', () => {
    const f = path.join(dir, 'big.json');
    const data = 'x'.repeat(100_000);
    restore = overrideFsPort({ writeSync: (fd, chunk) => fs.writeSync(fd, chunk.subarray(0, Math.min(chunk.length, 777))) });
    writeFileAtomic(f, data);
    expect(fs.readFileSync(f, 'utf8')).toBe(data);
  });

  it('never writes through a symlink at the destination: the link is replaced, its target untouched', () => {
    const target = path.join(dir, 'victim.txt');
    fs.writeFileSync(target, 'precious');
    const f = path.join(dir, 'status.json');
    fs.symlinkSync(target, f);
    writeFileAtomic(f, 'state');
    expect(fs.readFileSync(target, 'utf8')).toBe('precious');
    expect(fs.lstatSync(f).isSymbolicLink()).toBe(false);
    expect(fs.readFileSync(f, 'utf8')).toBe('state');
  });

  it('opens its temp file O_EXCL|O_NOFOLLOW (a planted temp name is never followed)', () => {
    const flags: number[] = [];
    restore = overrideFsPort({ openSync: ((p: fs.PathLike, fl: number, mode?: number) => { flags.push(fl); return fs.openSync(p, fl, mode); }) as typeof fs.openSync });
    writeFileAtomic(path.join(dir, 'x.json'), '1');
    expect(flags).toHaveLength(1);
    expect(flags[0]! & fs.constants.O_EXCL).toBeTruthy();
    expect(flags[0]! & fs.constants.O_NOFOLLOW).toBeTruthy();
    expect(flags[0]! & fs.constants.O_CREAT).toBeTruthy();
  });

  it('beginDurableReplace: the new version shows only at commit, after its fsync and before the directory\'s', async () => {
    const f = path.join(dir, 'status.json');
    writeFileAtomic(f, '{"state":"running"}');
    const order: string[] = [];
    restore = overrideFsPort({
      fsync: async (fd) => { order.push(`fsync ${fs.readlinkSync(`/proc/self/fd/${fd}`) === dir ? 'dir' : 'file'} seeing ${fs.readFileSync(f, 'utf8')}`); fs.fsyncSync(fd); },
      fsyncSync: (fd) => { order.push(`fsyncSync ${fs.readlinkSync(`/proc/self/fd/${fd}`) === dir ? 'dir' : 'file'} seeing ${fs.readFileSync(f, 'utf8')}`); fs.fsyncSync(fd); },
    });
    const pending = beginDurableReplace(f, '{"state":"completed"}');
    expect(fs.readFileSync(f, 'utf8')).toBe('{"state":"running"}');
    expect(leftovers()).toHaveLength(1);
    await pending.commit();
    expect(fs.readFileSync(f, 'utf8')).toBe('{"state":"completed"}');
    expect(fs.statSync(f).mode & 0o777).toBe(0o600);
    expect(leftovers()).toEqual([]);
    expect(order).toEqual(['fsync file seeing {"state":"running"}', 'fsyncSync dir seeing {"state":"completed"}']);
  });

  it('beginDurableReplace: a failed fsync is a coded refusal at commit: the previous version stays, no temp is left', async () => {
    const f = path.join(dir, 'status.json');
    writeFileAtomic(f, 'old');
    restore = overrideFsPort({ fsync: async () => { throw errno('EIO'); } });
    const pending = beginDurableReplace(f, 'new');
    const e = await pending.commit().catch((x: unknown) => x) as { code?: string; message?: string };
    expect(e.code).toBe('INTERNAL');
    expect(e.message).toMatch(/^could not write status\.json \(EIO\)/);
    expect(fs.readFileSync(f, 'utf8')).toBe('old');
    expect(leftovers()).toEqual([]);
  });

  it('beginDurableReplace: a temp that cannot be written throws at once and leaves nothing', () => {
    const f = path.join(dir, 'status.json');
    writeFileAtomic(f, 'old');
    restore = overrideFsPort({ writeSync: () => { throw errno('ENOSPC'); } });
    expect(() => beginDurableReplace(f, 'new')).toThrow(/ENOSPC/);
    expect(fs.readFileSync(f, 'utf8')).toBe('old');
    expect(leftovers()).toEqual([]);
  });
});

describe('createFileExclusive', () => {
  let dir: string;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-cx-')); });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('the first writer wins, the second gets false, and the content is the first one', () => {
    const f = path.join(dir, 'proceed');
    expect(createFileExclusive(f, 'first')).toBe(true);
    expect(createFileExclusive(f, 'second')).toBe(false);
    expect(fs.readFileSync(f, 'utf8')).toBe('first');
    expect(fs.statSync(f).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(dir)).toEqual(['proceed']);
  });

  it('a symlink in its place counts as taken and is not written through', () => {
    const target = path.join(dir, 'victim');
    fs.writeFileSync(target, 'precious');
    const f = path.join(dir, 'proceed');
    fs.symlinkSync(target, f);
    expect(createFileExclusive(f, 'x')).toBe(false);
    expect(fs.readFileSync(target, 'utf8')).toBe('precious');
    expect(fs.readdirSync(dir).sort()).toEqual(['proceed', 'victim']);
  });

  it('a failure leaves no temp file', () => {
    const restore = overrideFsPort({ fsyncSync: () => { throw errno('EIO'); } });
    try {
      expect(() => createFileExclusive(path.join(dir, 'p'), 'x')).toThrow(/EIO/);
    } finally {
      restore();
    }
    expect(fs.readdirSync(dir)).toEqual([]);
  });
});

describe('writeNewFile', () => {
  let dir: string;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-nf-')); });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('creates the file 0600 with its whole content and nothing beside it', () => {
    const f = path.join(dir, 'run.json');
    const old = process.umask(0o022);
    try {
      writeNewFile(f, 'x'.repeat(300_000));
    } finally {
      process.umask(old);
    }
    expect(fs.readFileSync(f, 'utf8')).toBe('x'.repeat(300_000));
    expect(fs.statSync(f).mode & 0o777).toBe(0o600);
    expect(fs.readdirSync(dir)).toEqual(['run.json']);
  });

  it('refuses an existing name, and a planted symlink is not written through', () => {
    const f = path.join(dir, 'status.json');
    writeNewFile(f, 'first');
    expect(() => writeNewFile(f, 'second')).toThrow(expect.objectContaining({ code: 'EEXIST' }));
    expect(fs.readFileSync(f, 'utf8')).toBe('first');
    const target = path.join(dir, 'victim');
    fs.writeFileSync(target, 'precious');
    fs.symlinkSync(target, path.join(dir, 'proceed.json'));
    expect(() => writeNewFile(path.join(dir, 'proceed.json'), 'x')).toThrow(expect.objectContaining({ code: 'EEXIST' }));
    expect(fs.readFileSync(target, 'utf8')).toBe('precious');
  });

  it('a short write is continued, and a disk fault is a coded refusal that names the file', () => {
    let calls = 0;
    const restore = overrideFsPort({ writeSync: (fd, data) => { calls++; return fs.writeSync(fd, data, 0, Math.min(data.length, 7)); } });
    try {
      writeNewFile(path.join(dir, 'a.json'), 'abcdefghijklmnopqrstuvwxyz');
    } finally {
      restore();
    }
    expect(fs.readFileSync(path.join(dir, 'a.json'), 'utf8')).toBe('abcdefghijklmnopqrstuvwxyz');
    expect(calls).toBe(4);
    const failing = overrideFsPort({ writeSync: () => { throw errno('ENOSPC'); } });
    try {
      expect(() => writeNewFile(path.join(dir, 'status.json'), 'x')).toThrow(/could not write .*ENOSPC/);
    } finally {
      failing();
    }
  });
});

describe('ensurePrivateDir', () => {
  let dir: string;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-pd-')); });
  afterEach(() => fs.rmSync(dir, { recursive: true, force: true }));

  it('creates 0700 and accepts an existing directory', () => {
    const d = path.join(dir, 'runs');
    const old = process.umask(0o022);
    try {
      ensurePrivateDir(d);
      ensurePrivateDir(d);
    } finally {
      process.umask(old);
    }
    expect(fs.statSync(d).mode & 0o777).toBe(0o700);
  });

  it('refuses a symlink in its place', () => {
    const real = path.join(dir, 'real');
    fs.mkdirSync(real);
    fs.symlinkSync(real, path.join(dir, 'runs'));
    expect(() => ensurePrivateDir(path.join(dir, 'runs'))).toThrow(/not a directory/);
  });

  it('says whether it made the directory', () => {
    const d = path.join(dir, 'runs');
    expect(ensurePrivateDir(d)).toBe(true);
    expect(ensurePrivateDir(d)).toBe(false);
  });
});

describe('ensureDurablePrivateDir', () => {
  let dir: string;
  let restore: (() => void) | undefined;
  beforeEach(() => { dir = fs.mkdtempSync(path.join(os.tmpdir(), 'sa-dpd-')); });
  afterEach(() => { restore?.(); restore = undefined; fs.rmSync(dir, { recursive: true, force: true }); });

  /** Records the paths fsynced, by the descriptor's target (real fsyncs still run). */
  function recordFsyncs(): string[] {
    const synced: string[] = [];
    restore = overrideFsPort({ fsyncSync: (fd) => { synced.push(fs.readlinkSync(`/proc/self/fd/${fd}`)); fs.fsyncSync(fd); } });
    return synced;
  }

  it.skipIf(process.platform !== 'linux')('fsyncs the parent, also when the directory exists (its maker may not have yet)', () => {
    const d = path.join(dir, 'appends');
    const synced = recordFsyncs();
    ensureDurablePrivateDir(d);
    expect(synced).toEqual([fs.realpathSync(dir)]);
    ensureDurablePrivateDir(d);
    expect(synced).toEqual([fs.realpathSync(dir), fs.realpathSync(dir)]);
    expect(fs.statSync(d).mode & 0o777).toBe(0o700);
  });

  it('fails when the parent\'s fsync fails (the new name is not durable)', () => {
    restore = overrideFsPort({ fsyncSync: () => { throw errno('EIO'); } });
    expect(() => ensureDurablePrivateDir(path.join(dir, 'appends'))).toThrow(/EIO/);
  });
});
