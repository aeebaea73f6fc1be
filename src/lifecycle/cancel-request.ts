import fs from 'node:fs';
import { writeFileAtomic } from '../store/atomic-write.js';
import { readJsonFile } from '../store/json-file.js';
import type { RunStore } from '../store/ports.js';
import { isTerminalRun } from '../store/run-types.js';
import { descendants, safeStatus } from './run-tree.js';

/** Why a run was asked to stop: by someone (`cancel`), or because the agent that launched it ended. */
export type CancelReason = 'CANCELLED' | 'PARENT_ENDED';

/**
 * `cancel-request.json` is how another process asks a run's runner to stop (the runner is the single writer of its
 * status). This module is the file's only writer and reader.
 */
export function requestCancel(store: RunStore, runId: string, reason: CancelReason, by?: string): void {
  writeFileAtomic(store.paths(runId).cancelRequest, JSON.stringify({ at: new Date().toISOString(), reason, ...(by ? { by } : {}) }));
}

/** Writes the request only if none is there (a request already written is not rewritten on every round of a wait). */
export function requestCancelOnce(store: RunStore, runId: string, reason: CancelReason): void {
  if (!fs.existsSync(store.paths(runId).cancelRequest)) requestCancel(store, runId, reason);
}

/**
 * The reason a run was asked to stop, or null when it was not. A request that does not parse still asks: it is
 * read as a plain cancel (a torn write of a canceller killed mid-way is a cancel all the same).
 */
export function readCancelRequest(store: RunStore, runId: string): CancelReason | null {
  let req: { reason?: unknown } | null;
  try {
    req = readJsonFile<{ reason?: unknown }>(store.paths(runId).cancelRequest);
  } catch {
    return 'CANCELLED';
  }
  if (req === null) return null;
  return req?.reason === 'PARENT_ENDED' ? 'PARENT_ENDED' : 'CANCELLED';
}

/**
 * Asks every active run under `runId` to stop at once (a cancel of a tree reaches all of it in one grace, instead of
 * one grace per level while each runner relays it). Each runner then ends its own run; unreachable ones are reconciled.
 */
export function requestTreeCancel(store: RunStore, runId: string, reason: CancelReason): void {
  for (const id of descendants(store, runId)) {
    const s = safeStatus(store, id);
    if (!s || isTerminalRun(s.state)) continue; // unreadable: its own reconciliation ends it
    try { requestCancel(store, id, reason); } catch { /* gone, or the disk refused: reconciliation ends it */ }
  }
}
