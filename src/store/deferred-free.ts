import fs from 'node:fs';

/**
 * Freeing a file's or a directory's data blocks is the dear part of replacing a state file (rename over the old one)
 * or of releasing a lock (rmdir): on an ext4 mounted with `discard` the free issues the discard to the device before
 * the system call returns (longer the busier the disk is), and every lock
 * section and state write of a run pays it on the thread that waits for the section. The kernel frees an inode's
 * blocks when its last reference goes, not at the unlink, rename or rmdir that drops its name: a reference taken
 * before (an `O_PATH` descriptor: no access, no side effect even on a device or FIFO) and dropped on the thread pool
 * moves that free off the caller's thread. The name's change itself is as immediate and exclusive as before.
 * Linux only (O_PATH); elsewhere nothing is pinned and the free happens in place, as before.
 */
const O_PATH = process.platform === 'linux' ? 0o10000000 : 0;

/** Descriptors whose close (and so the free of what they pinned) is under way on the thread pool. */
let pending = 0;
let settledWaiters: Array<() => void> = [];

/**
 * A reference to what `file` names now (the last component not followed), so that removing or replacing that name
 * next does not free it on this thread. Null when nothing is there (or not on Linux): nothing to defer.
 */
export function pinForFree(file: string): number | null {
  if (O_PATH === 0) return null;
  try {
    return fs.openSync(file, O_PATH | fs.constants.O_NOFOLLOW);
  } catch {
    return null;
  }
}

/** Drops the reference `pinForFree` took, on the thread pool: the inode, if its name is gone, is freed there. */
export function unpinLater(fd: number | null): void {
  if (fd === null) return;
  pending++;
  fs.close(fd, () => {
    if (--pending > 0) return;
    const waiters = settledWaiters;
    settledWaiters = [];
    for (const w of waiters) w();
  });
}

/**
 * Resolves once every reference dropped so far is closed: a warm runner counts its open descriptors before it serves
 * another run (runner/reuse.ts), and one still closing is not one the run left.
 */
export function deferredFreesSettled(): Promise<void> {
  if (pending === 0) return Promise.resolve();
  return new Promise((resolve) => settledWaiters.push(resolve));
}
