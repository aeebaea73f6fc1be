import fs from 'node:fs';

/**
 * The few file-system calls that change state, behind one seam so tests can inject ENOSPC, EACCES or EROFS at a
 * named write without breaking the machine. Production code never swaps it.
 */
export interface FsPort {
  openSync: typeof fs.openSync;
  writeSync: (fd: number, data: Uint8Array) => number;
  fsyncSync: typeof fs.fsyncSync;
  /** fsync on the thread pool: several at once share the file system's journal commits, and the loop goes on. */
  fsync: (fd: number) => Promise<void>;
  /** fdatasync on the thread pool (the run index's appends: their data, not their mtime, must be durable). */
  fdatasync: (fd: number) => Promise<void>;
  closeSync: typeof fs.closeSync;
  renameSync: typeof fs.renameSync;
  linkSync: typeof fs.linkSync;
  unlinkSync: typeof fs.unlinkSync;
  mkdirSync: typeof fs.mkdirSync;
  appendFileSync: typeof fs.appendFileSync;
}

const real: FsPort = {
  openSync: fs.openSync,
  writeSync: (fd, data) => fs.writeSync(fd, data),
  fsyncSync: fs.fsyncSync,
  fsync: (fd) => new Promise<void>((resolve, reject) => fs.fsync(fd, (e) => (e ? reject(e) : resolve()))),
  fdatasync: (fd) => new Promise<void>((resolve, reject) => fs.fdatasync(fd, (e) => (e ? reject(e) : resolve()))),
  closeSync: fs.closeSync,
  renameSync: fs.renameSync,
  linkSync: fs.linkSync,
  unlinkSync: fs.unlinkSync,
  mkdirSync: fs.mkdirSync,
  appendFileSync: fs.appendFileSync,
};

export let fsPort: FsPort = real;

/**
 * Test seam: replace some calls; returns a function that restores the real ones. A replaced `fsyncSync` stands for
 * `fsync` and `fdatasync` too unless those are replaced as well: a fault injected at "the fsync" hits every way of doing it.
 */
export function overrideFsPort(partial: Partial<FsPort>): () => void {
  const { fsyncSync } = partial;
  const viaSync = fsyncSync ? { fsync: async (fd: number) => { fsyncSync(fd); }, fdatasync: async (fd: number) => { fsyncSync(fd); } } : {};
  fsPort = { ...real, ...viaSync, ...partial };
  return () => { fsPort = real; };
}
