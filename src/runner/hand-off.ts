import path from 'node:path';
import type { ProcessIdentity } from '../process/identity.js';
import { startDetached } from '../process/detached-start.js';
import { handOff } from '../lifecycle/queue.js';
import type { RunPaths } from '../store/layout.js';
import { fileStatePorts } from '../lifecycle/state-ports.js';

/**
 * The runner's last act: the capacity slot its run freed goes to the head of the queue, started by this process as
 * its launcher (docs/limits.md, "The queue"). Spawned here on the main thread: the runner has nothing else to answer.
 */
export function handOffFreedSlot(paths: RunPaths, me: ProcessIdentity): Promise<number> {
  const { store, layout, ledger } = fileStatePorts(path.dirname(path.dirname(paths.dir)));
  return handOff({
    store, layout, ledger, self: me,
    spawn: (argv, o) => startDetached(argv, o),
    fault: process.env.SUBAGENTS_TEST_FAULT,
  });
}
