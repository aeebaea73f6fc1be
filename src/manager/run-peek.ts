import fs from 'node:fs';
import type { RunRecord, RunStatus } from '../store/run-types.js';
import type { ManagerContext } from './context.js';

/**
 * A state file's identity: status.json is only ever replaced whole (a new inode renamed into place), so a file whose
 * inode, size and times are those of the last read is that read (the ledger's lock-free reads rely on the same).
 * Null when the file is missing.
 */
export function fileKey(file: string): string | null {
  try {
    const st = fs.lstatSync(file, { bigint: true });
    return `${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}`;
  } catch {
    return null;
  }
}

/** The last read of each peeked file (status.json, run.json), by path, with the key of the file it read. */
const peeked = new Map<string, { key: string; value: unknown }>();
/** Files remembered at most: the runs a server follows at once, two files each, with room to spare. */
const MAX_PEEKED = 512;

function deepFreeze<T>(v: T): T {
  if (v !== null && typeof v === 'object' && !Object.isFrozen(v)) {
    Object.freeze(v);
    for (const x of Object.values(v)) deepFreeze(x);
  }
  return v;
}

/**
 * A run's status.json, read (opened through the home guard, parsed, checked against its schema) only when the file
 * changed since the last read by this process: one lstat otherwise. A waiting `status` and the run watcher both look
 * at every new version of a run's status, each on its own file events; the second look finds the first one's read.
 * A directory swapped for a symlink shows another inode, so such a look reads (and the guard refuses) as before.
 * The value is shared and frozen: callers only read it. Null when the file is missing; STATE_CORRUPT as `readStatus`.
 */
export function peekStatus(ctx: ManagerContext, runId: string): { key: string | null; status: RunStatus | null } {
  const { key, value } = peek(ctx.store.paths(runId).status, () => ctx.store.readStatus(runId));
  return { key, status: value };
}

/**
 * A run's run.json as `peekStatus` reads status.json: a `status` call read and checked the whole record (the largest
 * file of a run: its agents' definitions) to render every answer, though a record never changes once written.
 */
export function peekRecord(ctx: ManagerContext, runId: string): RunRecord | null {
  return peek(ctx.store.paths(runId).record, () => ctx.store.readRecord(runId)).value;
}

/** The record a launch has just written, as its file is now: the run's first `status` then reads no run.json. */
export function rememberRecord(ctx: ManagerContext, record: RunRecord): void {
  const file = ctx.store.paths(record.runId).record;
  const key = fileKey(file);
  if (key === null) return;
  remember(file, { key, value: deepFreeze(structuredClone(record)) });
}

function remember(file: string, entry: { key: string; value: unknown }): void {
  peeked.delete(file);
  peeked.set(file, entry);
  if (peeked.size > MAX_PEEKED) peeked.delete(peeked.keys().next().value!);
}

function peek<T>(file: string, read: () => T | null): { key: string | null; value: T | null } {
  const key = fileKey(file);
  if (key !== null) {
    const hit = peeked.get(file);
    if (hit && hit.key === key) return hit as { key: string; value: T };
  }
  const value = read();
  peeked.delete(file);
  if (key === null || value === null) return { key, value };
  const entry = { key, value: deepFreeze(value) };
  remember(file, entry);
  return entry;
}
