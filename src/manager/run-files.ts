import { isAlive, type ProcessIdentity } from '../process/identity.js';
import { readEvents, type RunEvent } from '../store/event-log.js';
import { isRunDirNoise } from '../store/layout.js';
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
