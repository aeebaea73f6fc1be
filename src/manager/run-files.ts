import fs from 'node:fs';
import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { readEvents, type RunEvent } from '../store/event-log.js';
import { isRunDirNoise } from '../store/layout.js';
import { openStateFile } from '../store/state-file.js';
import { DirWatch } from '../wait.js';
import type { ManagerContext } from './context.js';

export type { RunEvent };

/** A run's event log (`events.jsonl`), for `show` and the events resource; torn lines are skipped and counted. */
export function readRunEvents(ctx: ManagerContext, runId: string): { events: RunEvent[]; skipped: number } {
  return readEvents(ctx.store.paths(runId).events);
}

/** A recorded process with whether it still runs (identity-checked: a reused pid is not it). */
export function withLiveness(id: ProcessIdentity | null): (ProcessIdentity & { alive: boolean }) | null {
  return id ? { pid: id.pid, startTime: id.startTime, alive: isAlive(id) } : null;
}

/**
 * Watches directories of runs and calls `onChange` for a change that may say something about a run's state: the
 * files every step rewrites (logs, locks, temps) are ignored. A directory that cannot be watched is left to the
 * caller's poll.
 */
export function watchRunDirs(dirs: readonly string[], onChange: () => void): DirWatch {
  return new DirWatch(dirs, (name) => !isRunDirNoise(name), onChange);
}

/**
 * Opens a run's file for reading: never through a symlink, never blocking on a FIFO in its place, only a regular
 * file (see src/store/state-file.ts). The fd, or null when the file is missing or is not one to read.
 */
export function openRunFile(file: string): number | null {
  try {
    return openStateFile(file, file)?.fd ?? null;
  } catch {
    return null;
  }
}

/** Bytes [offset, offset+length) of a run's file and its size, opened as openRunFile does; empty when it is missing. */
export function readFileBytes(file: string, offset: number, length: number): { buf: Buffer; size: number } {
  let opened: { fd: number; size: number } | null;
  try {
    opened = openStateFile(file, file);
  } catch {
    opened = null;
  }
  if (opened === null) return { buf: Buffer.alloc(0), size: 0 };
  const { fd, size } = opened;
  try {
    const len = Math.max(0, Math.min(length, size - offset));
    // Not zero-filled: only the bytes read are returned (filling 4 MiB first cost ~1/4 of a big read's own time).
    const buf = Buffer.allocUnsafeSlow(len);
    let got = 0;
    while (got < len) {
      const n = fs.readSync(fd, buf, got, len - got, offset + got);
      if (n === 0) break;
      got += n;
    }
    return { buf: buf.subarray(0, got), size };
  } finally {
    fs.closeSync(fd);
  }
}
