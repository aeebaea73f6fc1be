import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { ReadyFile, readStateFile } from '../store/state-files.js';
import type { Ledger } from '../store/ledger.js';
import type { RunStore } from '../store/ports.js';
import { isTerminalRun, type RunRecord, type RunStatus } from '../store/run-types.js';

/** Every run below `runId` in its tree (not itself), found through the children markers. */
export function descendants(store: RunStore, runId: string): string[] {
  const out: string[] = [];
  const seen = new Set([runId]);
  const stack = [runId];
  while (stack.length) {
    const id = stack.pop()!;
    let kids: Array<{ runId: string }> = [];
    try { kids = store.children(id); } catch { /* a damaged marker: its run is found by its record elsewhere */ }
    for (const c of kids) {
      if (seen.has(c.runId)) continue;
      seen.add(c.runId);
      out.push(c.runId);
      stack.push(c.runId);
    }
  }
  return out;
}

export function safeStatus(store: RunStore, runId: string): RunStatus | null {
  try { return store.readStatus(runId); } catch { return null; }
}

export function safeRecord(store: RunStore, runId: string): RunRecord | null {
  try { return store.readRecord(runId); } catch { return null; }
}

/** The runner's identity as it reported it in the handshake (before status names it). */
export function readyIdentity(store: RunStore, runId: string): ProcessIdentity | null {
  try { return readStateFile<ProcessIdentity>(store.paths(runId).ready, ReadyFile); } catch { return null; }
}

/**
 * Whether a run may still be going: not terminal, and its runner alive — or, still starting, its launching server
 * alive (it is handshaking and bounds that itself; an unbound reservation is bounded by capacity pruning). A damaged
 * status is judged by its processes alone. A run whose runner is gone is not live here: what it left (agents) is
 * counted through agent slots, and reconciliation records its end.
 */
export function runMayBeLive(store: RunStore, runId: string): boolean {
  const status = safeStatus(store, runId);
  if (status && isTerminalRun(status.state)) return false;
  if (isAlive(status?.runner) || isAlive(readyIdentity(store, runId))) return true;
  if (status && status.state !== 'starting') return false;
  const record = safeRecord(store, runId);
  return record !== null && isAlive(record.server);
}

/**
 * Whether a root must keep its capacity slot: an agent slot of its tree is live (its holder or its agent), or a run
 * below it may still be going. A root holds its slot until its whole tree has ended, whatever ended the root itself.
 */
export function treeIsLive(l: Ledger, store: RunStore, rootRunId: string): boolean {
  if (Object.values(l.agents).some((a) => a.root === rootRunId && (isAlive(a.runner) || isAlive(a.agent)))) return true;
  return descendants(store, rootRunId).some((id) => runMayBeLive(store, id));
}
